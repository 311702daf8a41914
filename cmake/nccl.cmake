# NCCL (nccl.h and libnccl), for context parallelism over NCCL (src/cp). Where
# it comes from: NCCL_ROOT (CMake or environment), the CUDA toolkit / system
# (Debian build machines), or PyTorch's nvidia-nccl package (the GPU machine).
# Without it the rest of attn builds; the NCCL transport is left out and
# cp::nccl_available() says so. Sets ATTN_HAVE_NCCL and the target attn_nccl_deps.
option(ATTN_WITH_NCCL "Build context parallelism over NCCL when NCCL is found" ON)
set(ATTN_HAVE_NCCL OFF)
if(NOT ATTN_WITH_NCCL)
  return()
endif()

set(_attn_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT})
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import nvidia.nccl as m; print(list(m.__path__)[0])"
                  OUTPUT_VARIABLE _attn_py_nccl OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_attn_py_nccl)
    list(APPEND _attn_nccl_hints ${_attn_py_nccl})
  endif()
endif()
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_attn_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
# The pip package ships only the versioned name.
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
             HINTS ${_attn_nccl_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)

if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  set(ATTN_HAVE_NCCL ON)
  add_library(attn_nccl_deps INTERFACE IMPORTED)
  target_include_directories(attn_nccl_deps INTERFACE ${NCCL_INCLUDE_DIR})
  target_link_libraries(attn_nccl_deps INTERFACE ${NCCL_LIBRARY})
  message(STATUS "attn: context parallelism over NCCL: ${NCCL_LIBRARY}")
else()
  message(STATUS "attn: NCCL not found (nccl.h: ${NCCL_INCLUDE_DIR}, libnccl: ${NCCL_LIBRARY}): "
                 "context parallelism over NCCL is not built; set NCCL_ROOT")
endif()
