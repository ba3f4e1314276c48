# What the LibTorch found by find_package(Torch) can do, decided from that
# LibTorch itself (never from a hand-set option that could disagree with it).
# Included right after find_package(Torch); sets, in the caller's scope:
#   ACCEL_WITH_CUDA  1 where the LibTorch is a CUDA build (its own
#                    CAFFE2_USE_CUDA flag and its torch_cuda library)
#   ACCEL_WITH_NCCL  1 where it also has c10d's NCCL process group: the
#                    USE_C10D_NCCL define on torch_cuda, the header
#                    ProcessGroupNCCL.hpp, the constructor exported by
#                    libtorch_cuda.so, and nccl.h to compile the header against
#   ACCEL_C10D_GLOO, ACCEL_C10D_REDUCER  yes/no, for the configure summary only
#   ACCEL_NCCL_INCLUDE_DIR  where nccl.h is (when ACCEL_WITH_NCCL)
# and repairs TORCH_LIBRARIES (see accel_torch_own_libraries below).

# TorchConfig.cmake looks some libraries up with find_library(NAME PATHS
# <prefix>/lib), which searches the system's library folders first: with
# Debian's libtorch-dev installed, a pip LibTorch would link Debian's 1.13
# libc10.so beside its own libtorch. Point each such entry back into the
# LibTorch's own lib/ folder.
function(accel_torch_own_libraries)
  set(fixed "")
  foreach(item IN LISTS TORCH_LIBRARIES)
    if(IS_ABSOLUTE "${item}" AND TORCH_INSTALL_PREFIX)
      get_filename_component(name "${item}" NAME)
      set(own "${TORCH_INSTALL_PREFIX}/lib/${name}")
      if(EXISTS "${own}")
        get_filename_component(real_item "${item}" REALPATH)
        get_filename_component(real_own "${own}" REALPATH)
        if(NOT real_item STREQUAL real_own)
          message(STATUS "accel-bench: linking ${own} instead of ${item}")
          set(item "${own}")
        endif()
      endif()
    endif()
    list(APPEND fixed "${item}")
  endforeach()
  set(TORCH_LIBRARIES "${fixed}" PARENT_SCOPE)
endfunction()

# First header named REL under the LibTorch's include folders, or "".
function(accel_torch_header out rel)
  set(found "")
  foreach(dir IN LISTS TORCH_INCLUDE_DIRS)
    if(NOT found AND EXISTS "${dir}/${rel}")
      set(found "${dir}/${rel}")
    endif()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# Whether the shared library LIB exports a dynamic symbol matching REGEX.
# Unknown (nm missing, or LIB not a file) counts as yes: the define and the
# header already said so, and the link step would catch a lie.
function(accel_exports out lib regex)
  set(${out} ON PARENT_SCOPE)
  find_program(ACCEL_NM nm)
  if(NOT ACCEL_NM OR NOT EXISTS "${lib}")
    return()
  endif()
  execute_process(COMMAND ${ACCEL_NM} -D --defined-only "${lib}"
                  OUTPUT_VARIABLE syms ERROR_QUIET RESULT_VARIABLE rc)
  if(rc EQUAL 0 AND NOT syms MATCHES "${regex}")
    set(${out} OFF PARENT_SCOPE)
  endif()
endfunction()

# The file of an imported library target, whatever configuration it was built in.
function(accel_imported_file out target)
  set(file "")
  foreach(prop IMPORTED_LOCATION_RELEASE IMPORTED_LOCATION IMPORTED_LOCATION_NOCONFIG
               IMPORTED_LOCATION_RELWITHDEBINFO)
    if(NOT file)
      get_target_property(file ${target} ${prop})
      if(NOT file)
        set(file "")
      endif()
    endif()
  endforeach()
  set(${out} "${file}" PARENT_SCOPE)
endfunction()

accel_torch_own_libraries()

# --- CUDA ---------------------------------------------------------------------------
set(ACCEL_WITH_CUDA 0)
if(CAFFE2_USE_CUDA AND TARGET torch_cuda)
  set(ACCEL_WITH_CUDA 1)
endif()

# --- NCCL process group ------------------------------------------------------------
set(ACCEL_WITH_NCCL 0)
set(_accel_nccl_why "no CUDA")
if(ACCEL_WITH_CUDA)
  get_target_property(_accel_defs torch_cuda INTERFACE_COMPILE_DEFINITIONS)
  accel_torch_header(_accel_pg_nccl torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp)
  accel_imported_file(_accel_torch_cuda_file torch_cuda)
  # A pip LibTorch's nccl.h is in the nvidia-nccl wheel beside torch/; a
  # LibTorch zip relies on the CUDA toolkit's (or a system) nccl.h.
  find_path(ACCEL_NCCL_INCLUDE_DIR nccl.h
            HINTS "${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include" ${CUDAToolkit_INCLUDE_DIRS})
  if(NOT "USE_C10D_NCCL" IN_LIST _accel_defs)
    set(_accel_nccl_why "built without USE_C10D_NCCL")
  elseif(NOT _accel_pg_nccl)
    set(_accel_nccl_why "no ProcessGroupNCCL.hpp in its headers")
  elseif(NOT ACCEL_NCCL_INCLUDE_DIR)
    set(_accel_nccl_why "nccl.h not found (set ACCEL_NCCL_INCLUDE_DIR)")
  else()
    accel_exports(_accel_nccl_syms "${_accel_torch_cuda_file}" "16ProcessGroupNCCLC[12]E")
    if(_accel_nccl_syms)
      set(ACCEL_WITH_NCCL 1)
      set(_accel_nccl_why "")
    else()
      set(_accel_nccl_why "${_accel_torch_cuda_file} does not export ProcessGroupNCCL")
    endif()
  endif()
endif()

# --- libstdc++ symbols exported by the LibTorch ---------------------------------------
# PyPI's LibTorch (manylinux_2_28, built with a newer GCC than its base system)
# links parts of libstdc++ statically and exports them: libtorch.so defines
# std::filesystem::remove_all and 60-odd others (pytorch/pytorch#133437). An
# executable that lists libtorch.so before libstdc++.so in DT_NEEDED binds its
# own std::filesystem calls to those copies, which crash here (a null call in
# remove_all). Where the LibTorch exports them, ACCEL_TORCH_LINK_OPTIONS puts
# libstdc++.so first, so the system's definitions win.
set(ACCEL_TORCH_LINK_OPTIONS "")
set(_accel_exports_std OFF)
foreach(_accel_t IN ITEMS torch torch_cpu)
  if(TARGET ${_accel_t} AND NOT _accel_exports_std)
    accel_imported_file(_accel_file ${_accel_t})
    if(_accel_file AND EXISTS "${_accel_file}")
      accel_exports(_accel_exports_std "${_accel_file}" "_ZNSt10filesystem")
      if(_accel_exports_std)
        message(STATUS "accel-bench: ${_accel_file} exports std::filesystem; libstdc++ linked first")
      endif()
    endif()
  endif()
endforeach()
if(_accel_exports_std)
  set(ACCEL_TORCH_LINK_OPTIONS "SHELL:-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state")
endif()

# --- c10d parts reported for information -------------------------------------------
accel_torch_header(_accel_pg_gloo torch/csrc/distributed/c10d/ProcessGroupGloo.hpp)
accel_torch_header(_accel_reducer torch/csrc/distributed/c10d/reducer.hpp)
set(ACCEL_C10D_GLOO no)
if(_accel_pg_gloo)
  set(ACCEL_C10D_GLOO yes)
endif()
set(ACCEL_C10D_REDUCER no)
if(_accel_reducer)
  set(ACCEL_C10D_REDUCER yes)
endif()

set(_accel_features "accel-bench: ACCEL_WITH_CUDA=${ACCEL_WITH_CUDA} ACCEL_WITH_NCCL=${ACCEL_WITH_NCCL}")
if(_accel_nccl_why AND ACCEL_WITH_CUDA)
  string(APPEND _accel_features " (NCCL: ${_accel_nccl_why})")
endif()
if(ACCEL_WITH_CUDA)
  string(APPEND _accel_features " CUDA ${CUDAToolkit_VERSION}")
endif()
message(STATUS "${_accel_features}; c10d ProcessGroupGloo.hpp ${ACCEL_C10D_GLOO}, reducer.hpp ${ACCEL_C10D_REDUCER}")
# The same, for scripts (scripts/test-cuda-leg.sh checks that every CUDA part is on).
file(WRITE "${CMAKE_BINARY_DIR}/accel-features.txt"
     "LIBTORCH=${Torch_VERSION}\nACCEL_WITH_CUDA=${ACCEL_WITH_CUDA}\nACCEL_WITH_NCCL=${ACCEL_WITH_NCCL}\n")
