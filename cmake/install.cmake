# Install rules and the CMake package: libattn (every backend's and kernel
# row's objects are inside it), include/attn, the attn command when built, and
# lib/cmake/attn (attnConfig.cmake, its version file, attnTargets.cmake) so a
# project writes find_package(attn CONFIG) and links attn::attn. docs/INSTALL.md.
include(CMakePackageConfigHelpers)

set(ATTN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/attn CACHE STRING
    "Where attnConfig.cmake is installed, relative to the prefix")

install(TARGETS attn EXPORT attnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The public headers include only each other and the standard library; the
# cudnn-frontend headers stay private to the build (scripts/check_cmake_package.sh checks).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/attn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")

if(TARGET attn_cli)
  # The command links the shared CUDA, cuDNN and NCCL libraries: keep the
  # folders this build found them in, as the build tree's binary does.
  set_target_properties(attn_cli PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS attn_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(EXPORT attnTargets NAMESPACE attn:: DESTINATION ${ATTN_INSTALL_CMAKEDIR})

# What the config needs to find the libraries libattn.a's objects call, as this
# build found them (attnConfig.cmake.in looks there first, then under *_ROOT).
set(ATTN_CUDNN_LIBRARY_DIR "")
set(ATTN_NCCL_LIBRARY_DIR "")
if(ATTN_HAVE_CUDNN)
  get_filename_component(ATTN_CUDNN_LIBRARY_DIR "${CUDNN_LIBRARY}" DIRECTORY)
  get_filename_component(ATTN_CUDNN_LIBRARY_NAME "${CUDNN_LIBRARY}" NAME)
endif()
if(ATTN_HAVE_NCCL)
  get_filename_component(ATTN_NCCL_LIBRARY_DIR "${NCCL_LIBRARY}" DIRECTORY)
  get_filename_component(ATTN_NCCL_LIBRARY_NAME "${NCCL_LIBRARY}" NAME)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/attnConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/attnConfig.cmake
                              INSTALL_DESTINATION ${ATTN_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/attnConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/attnConfig.cmake ${PROJECT_BINARY_DIR}/attnConfigVersion.cmake
        DESTINATION ${ATTN_INSTALL_CMAKEDIR})
