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

include(${CMAKE_CURRENT_LIST_DIR}/find_nvidia_library.cmake)
attn_find_nvidia_library(NCCL nccl.h nccl nccl libnccl.so.2)

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
