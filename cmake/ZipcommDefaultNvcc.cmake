# Lets a CUDA toolkit in the standard place (/usr/local/cuda) be found even when nvcc is not on PATH; a
# CMAKE_CUDA_COMPILER or CUDACXX given by the user wins. Shared by the library's and the Python package's builds.
macro(zipcomm_default_nvcc)
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(_zipcomm_nvcc_on_path nvcc NO_CACHE)
    if(NOT _zipcomm_nvcc_on_path AND EXISTS "/usr/local/cuda/bin/nvcc")
      set(ENV{CUDACXX} "/usr/local/cuda/bin/nvcc")
    endif()
  endif()
endmacro()
