# FindNCCLLocal: find NCCL headers and library (not used by any target yet; for the comm/ layer).
#
# Searches nccl.h and libnccl.so in NCCL_ROOT / $ENV{NCCL_ROOT}, the Debian locations
# (/usr/include, /usr/lib/x86_64-linux-gnu), the CUDA toolkit (CUDAToolkit_INCLUDE_DIRS, /usr/local/cuda).
# Results:
#   ZIPCOMM_HAS_NCCL       ON when found (also NCCLLocal_FOUND)
#   ZIPCOMM_NCCL_VERSION   e.g. 2.28.9, parsed from NCCL_MAJOR/NCCL_MINOR/NCCL_PATCH in nccl.h
#   zipcomm_nccl           imported target (include dir + libnccl.so); link it to use NCCL
#   NCCL_INCLUDE_DIR, NCCL_LIBRARY (cache)
if(NOT DEFINED CUDAToolkit_INCLUDE_DIRS)
  find_package(CUDAToolkit QUIET)
endif()

set(_zipcomm_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} ${NCCL_HOME} $ENV{NCCL_HOME})
find_path(NCCL_INCLUDE_DIR nccl.h
          HINTS ${_zipcomm_nccl_hints}
          PATH_SUFFIXES include
          PATHS /usr/include ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
             HINTS ${_zipcomm_nccl_hints}
             PATH_SUFFIXES lib lib64
             PATHS /usr/lib/x86_64-linux-gnu ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)

set(ZIPCOMM_NCCL_VERSION "")
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _zipcomm_nccl_defs REGEX "^#define NCCL_(MAJOR|MINOR|PATCH)[ \t]+[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${_part}[ \t]+([0-9]+)" _m "${_zipcomm_nccl_defs}")
    set(_zipcomm_nccl_${_part} "${CMAKE_MATCH_1}")
  endforeach()
  set(ZIPCOMM_NCCL_VERSION "${_zipcomm_nccl_MAJOR}.${_zipcomm_nccl_MINOR}.${_zipcomm_nccl_PATCH}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCLLocal REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
                                  VERSION_VAR ZIPCOMM_NCCL_VERSION)

set(ZIPCOMM_HAS_NCCL OFF)
if(NCCLLocal_FOUND)
  set(ZIPCOMM_HAS_NCCL ON)
  if(NOT TARGET zipcomm_nccl)
    add_library(zipcomm_nccl UNKNOWN IMPORTED GLOBAL)
    set_target_properties(zipcomm_nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                                                  INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
  endif()
  message(STATUS "zipcomm: NCCL ${ZIPCOMM_NCCL_VERSION} (NCCL_MAJOR=${_zipcomm_nccl_MAJOR} "
                 "NCCL_MINOR=${_zipcomm_nccl_MINOR} NCCL_PATCH=${_zipcomm_nccl_PATCH}): "
                 "${NCCL_INCLUDE_DIR}/nccl.h, ${NCCL_LIBRARY}")
else()
  message(STATUS "zipcomm: NCCL not found (nccl.h / libnccl.so); NCCL-based targets are skipped")
endif()
set(ZIPCOMM_HAS_NCCL ${ZIPCOMM_HAS_NCCL} CACHE INTERNAL "NCCL found for zipcomm")
