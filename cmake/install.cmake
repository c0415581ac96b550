# `cmake --install BUILD --prefix P`: the public headers (include/ember, not ember_support's),
# libember.a and libember.so (the library parts' objects in one library), emberConfig.cmake + its
# version file (targets ember::ember and ember::ember_static) and ember.pc. Both files locate the
# prefix relative to themselves, so a tree installed anywhere (or moved) works.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
# The parts of `ember` (CMakeLists.txt): ember_bench and ember_report are the CLI's (ember_support).
set(EMBER_PARTS ember_kernels ember_fs ember_core ember_ops ember_nn ember_train ember_data ember_io
    ember_onnx ember_quant ember_bitnet)
set(EMBER_OBJECTS "")
foreach(part IN LISTS EMBER_PARTS)
  list(APPEND EMBER_OBJECTS $<TARGET_OBJECTS:${part}>)
endforeach()
add_library(ember_static STATIC ${EMBER_OBJECTS})
set_target_properties(ember_static PROPERTIES OUTPUT_NAME ember)
add_library(ember_shared SHARED ${EMBER_OBJECTS})
set_target_properties(ember_shared PROPERTIES OUTPUT_NAME ember VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
target_link_libraries(ember_shared PRIVATE Threads::Threads ZLIB::ZLIB PkgConfig::SPNG PkgConfig::TURBOJPEG
                      protobuf::libprotobuf-lite)

install(TARGETS ember_static ember_shared
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ember ${PROJECT_BINARY_DIR}/generated/ember
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h" PATTERN "*.inc" PATTERN "dist.h" EXCLUDE)
set(EMBER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ember)
file(RELATIVE_PATH EMBER_CONFIG_TO_PREFIX /prefix/${EMBER_CMAKE_DIR} /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/emberConfig.cmake.in ${PROJECT_BINARY_DIR}/emberConfig.cmake @ONLY)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/emberConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/emberConfig.cmake ${PROJECT_BINARY_DIR}/emberConfigVersion.cmake
        DESTINATION ${EMBER_CMAKE_DIR})
file(RELATIVE_PATH EMBER_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/ember.pc.in ${PROJECT_BINARY_DIR}/ember.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/ember.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
