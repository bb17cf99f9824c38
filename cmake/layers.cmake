# The layers of src/gemmax, bottom up. Each is a static library that links only the layers it
# may use; cmake/check_layers.cmake reads the same table and fails the build when a file includes
# a header from any other layer, so an arrow pointing up cannot creep in.
#
# A layer is a folder under src/gemmax (GEMMAX_LAYER_DIR_<layer>, relative to it); a folder
# nested in another layer's folder belongs to the nested layer, not to the outer one. The cuda
# emulator (backend/cuda/emu) is a layer of its own: it runs the cuda kernels on the host for the
# tests and for backend=cuda_emulated, and nothing in the cuda backend itself depends on it. The
# backend factory (backend/backend_factory.cc) is the one file that knows every backend.
set(GEMMAX_LAYERS base config io data backend cuda_emulator backend_factory model parallel
                  checkpoint train)
set(GEMMAX_LAYER_DIR_base base)
set(GEMMAX_LAYER_DIR_config config)
set(GEMMAX_LAYER_DIR_io io)
set(GEMMAX_LAYER_DIR_data data)
set(GEMMAX_LAYER_DIR_backend backend)
set(GEMMAX_LAYER_DIR_cuda_emulator backend/cuda/emu)
set(GEMMAX_LAYER_DIR_backend_factory backend/backend_factory)
set(GEMMAX_LAYER_DIR_model model)
set(GEMMAX_LAYER_DIR_parallel parallel)
set(GEMMAX_LAYER_DIR_checkpoint checkpoint)
set(GEMMAX_LAYER_DIR_train train)
# What each layer may include and link (every layer may use its own files).
set(GEMMAX_LAYER_USES_base "")
set(GEMMAX_LAYER_USES_config backend base)
set(GEMMAX_LAYER_USES_io config base)
set(GEMMAX_LAYER_USES_data base)
set(GEMMAX_LAYER_USES_backend base)
set(GEMMAX_LAYER_USES_cuda_emulator backend base)
set(GEMMAX_LAYER_USES_backend_factory cuda_emulator backend base)
set(GEMMAX_LAYER_USES_model backend data config base)
set(GEMMAX_LAYER_USES_parallel model backend data config base)
set(GEMMAX_LAYER_USES_checkpoint parallel model backend io config base)
set(GEMMAX_LAYER_USES_train checkpoint parallel model backend_factory backend io data config base)
