# One summary at the end of configure: which backends this build has, and for
# each one left out, why and how to bring it in.
set(_attn_cudnn "left out: ${ATTN_CUDNN_WHY}")
if(ATTN_HAVE_CUDNN)
  set(_attn_cudnn "built (${CUDNN_LIBRARY}; frontend ${CUDNN_FRONTEND_INCLUDE_DIR})")
endif()
set(_attn_nccl "left out: ${ATTN_NCCL_WHY}; cp::nccl_available() says so")
if(ATTN_HAVE_NCCL)
  set(_attn_nccl "built (${NCCL_LIBRARY})")
endif()
set(_attn_install "off (ATTN_INSTALL=OFF)")
if(ATTN_INSTALL)
  set(_attn_install "cmake --install to ${CMAKE_INSTALL_PREFIX}")
endif()
message(STATUS "attn ${PROJECT_VERSION} (commit ${ATTN_GIT_COMMIT}), CUDA ${CUDAToolkit_VERSION}, "
               "architectures ${CMAKE_CUDA_ARCHITECTURES}")
message(STATUS "  backend reference:  built (CPU)")
message(STATUS "  backend unfused:    built")
message(STATUS "  backend cudnn:      ${_attn_cudnn}")
message(STATUS "  backend flash_sm80: built")
message(STATUS "  backend flash_sm90: built (sm_90a kernels)")
message(STATUS "  context parallelism over NCCL: ${_attn_nccl}")
message(STATUS "  tests: ${ATTN_BUILD_TESTS}, attn command: ${ATTN_BUILD_TOOLS}, Python extension: ${ATTN_BUILD_PYTHON}, "
               "install: ${_attn_install}")
