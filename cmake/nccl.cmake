# NCCL (nccl.h and libnccl), for context parallelism over NCCL (src/cp). Where
# it comes from: NCCL_ROOT (CMake or environment), the CUDA toolkit / system
# (Debian build machines), or PyTorch's nvidia-nccl package (the GPU machine).
# Without it the rest of attn builds; the NCCL transport is left out and
# cp::nccl_available() says so. Sets ATTN_HAVE_NCCL, ATTN_NCCL_WHY (why it is
# left out, for the summary) and the imported target attn::nccl_deps.
option(ATTN_WITH_NCCL "Build context parallelism over NCCL when NCCL is found" ON)
set(ATTN_HAVE_NCCL OFF)
if(NOT ATTN_WITH_NCCL)
  set(ATTN_NCCL_WHY "ATTN_WITH_NCCL=OFF")
  return()
endif()

include(${CMAKE_CURRENT_LIST_DIR}/find_nvidia_library.cmake)
attn_find_nvidia_library(NCCL nccl.h nccl nccl libnccl.so.2)

if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  set(ATTN_HAVE_NCCL ON)
  add_library(attn::nccl_deps INTERFACE IMPORTED)
  target_include_directories(attn::nccl_deps INTERFACE ${NCCL_INCLUDE_DIR})
  target_link_libraries(attn::nccl_deps INTERFACE ${NCCL_LIBRARY})
elseif(NOT NCCL_INCLUDE_DIR)
  set(ATTN_NCCL_WHY "nccl.h not found (pass -DNCCL_ROOT=...)")
else()
  set(ATTN_NCCL_WHY "libnccl not found beside ${NCCL_INCLUDE_DIR} (pass -DNCCL_ROOT=...)")
endif()
