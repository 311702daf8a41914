# attn_find_nvidia_library(<NAME> <header> <python package> <library names...>)
# finds an NVIDIA library that lives in one of three places: <NAME>_ROOT (CMake
# variable or environment), the CUDA toolkit / system (Debian build machines),
# or PyTorch's pip package nvidia.<python package> (the GPU machine, where the
# pip wheels ship only versioned names such as libcudnn.so.9). Sets the cache
# variables <NAME>_INCLUDE_DIR and <NAME>_LIBRARY (NOTFOUND when absent).
function(attn_find_nvidia_library name header package)
  set(hints ${${name}_ROOT} $ENV{${name}_ROOT})
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_FOUND)
    execute_process(COMMAND ${Python3_EXECUTABLE} -c "import nvidia.${package} as m; print(list(m.__path__)[0])"
                    OUTPUT_VARIABLE from_pip OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(from_pip)
      list(APPEND hints ${from_pip})
    endif()
  endif()
  find_path(${name}_INCLUDE_DIR ${header} HINTS ${hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(${name}_LIBRARY NAMES ${ARGN} HINTS ${hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
endfunction()
