# Shared helper for the find modules: a package found through pkg-config becomes an IMPORTED target.
include(FindPackageHandleStandardArgs)
find_package(PkgConfig QUIET)

macro(hd_find_pkgconfig name module target)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(PC_${name} QUIET ${module})
  endif()
  find_path(${name}_INCLUDE_DIR NAMES ${ARGN} HINTS ${PC_${name}_INCLUDE_DIRS})
  find_library(${name}_LIBRARY NAMES ${module} ${PC_${name}_LIBRARIES} HINTS ${PC_${name}_LIBRARY_DIRS})
  find_package_handle_standard_args(${name} REQUIRED_VARS ${name}_LIBRARY ${name}_INCLUDE_DIR
                                    VERSION_VAR PC_${name}_VERSION)
  if(${name}_FOUND AND NOT TARGET ${target})
    add_library(${target} UNKNOWN IMPORTED GLOBAL)
    set_target_properties(${target} PROPERTIES IMPORTED_LOCATION "${${name}_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${${name}_INCLUDE_DIR}")
  endif()
endmacro()
