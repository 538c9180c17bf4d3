/*
 * kdc: the command line.  `kdc compile`, `kdc run`, `kdc inspect`, `kdc devices`.
 * Exit status: 0 ok, 2 bad input (model, layout, plan, array, flag), 3
 * internal error.  Every error is one line on stderr naming the file and the
 * place.
 */
#include <stdio.h>
#include <string.h>

#include "common/trace.h"
#include "runtime/runtime.h"  /* kdc_rt_blas_select_core */
#include "tools/cli.h"

#ifndef KDC_VERSION_STRING
#define KDC_VERSION_STRING "0.0.0"
#endif

static const char usage[] =
    "usage: kdc <command> [options]\n"
    "\n"
    "commands:\n"
    "  compile MODEL -o PLAN   compile a Keras model file into an execution plan\n"
    "      MODEL                 a Keras 3 .keras archive or model.to_json(), a legacy\n"
    "                            tf.keras 2 .h5 model or to_json(), or a TF.js model.json\n"
    "      -o, --output PLAN     the plan to write (atomically)\n"
    "      --weights W           weights: a Keras .weights.h5 (save_weights), legacy .h5,\n"
    "                            .keras, .safetensors named by Keras variable path (also a\n"
    "                            --save-weights checkpoint: its optimizer state is restored\n"
    "                            into a plan training with the same optimizer), or a\n"
    "                            TF.js model.json with its shards; default: the model's own\n"
    "                            (.keras, .h5, TF.js shards) if any, else Keras\n"
    "                            initialisers from --seed\n"
    "      --batch N             global batch the plan is compiled for (default 32, or the\n"
    "                            batch an InputLayer's batch_shape fixes)\n"
    "      --seed S              seed of the default initialisers (default 0)\n"
    "      --random-init         use the initialisers even if the model carries weights\n"
    "      --input-shape [NAME=]D1,D2  static dims (after the batch dim) of a model input\n"
    "                            whose shape has unknown (None) dims, e.g. a sequence length\n"
    "      --mesh SHAPE          device mesh: 8, 2x4, 2x2x2 ... (row-major device order)\n"
    "      --axes A,B            mesh axis names (default data; data,model; data,model,axis2..)\n"
    "      --layout L.json       Keras ModelParallel as JSON: batch_dim_name + layout_map;\n"
    "                            without it: DataParallel (batch over every device)\n"
    "      --layout auto         kdc chooses the layout: data, tensor (column/row, heads)\n"
    "                            and FSDP splits scored by predicted step time and memory\n"
    "      --memory-per-device S with --layout auto: the limit per device (512MiB, 2GB)\n"
    "      --objective O         with --layout auto: time (default) or memory\n"
    "      --write-layout F      with --layout auto: write the chosen layout.json to F\n"
    "      --machine F           with --layout auto: the cost model's machine (JSON)\n"
    "      --layout-match M      fullmatch (Keras >= 3.14, default) or search (3.0-3.13)\n"
    "      --loss L              add train_step and evaluate: mean_squared_error,\n"
    "                            mean_absolute_error, binary_crossentropy,\n"
    "                            categorical_crossentropy, sparse_categorical_crossentropy\n"
    "      --from-logits         the trained output is logits (crossentropy losses)\n"
    "      --optimizer O         sgd (default), adam, adamw, rmsprop (Keras 3 defaults)\n"
    "      --learning-rate R     the optimizer's learning rate\n"
    "      --no-shard-update     every device updates its whole copy of a replicated weight;\n"
    "                            default: the update of a weight replicated over the batch\n"
    "                            axes runs on 1/n pieces with sharded optimizer slots\n"
    "                            (reduce_scatter + all_gather; docs/training.md)\n"
    "      --target T            cpu (default) or cuda: also lower every kernel to PTX\n"
    "                            (GEMMs as cuBLAS, collectives as NCCL; docs/gpu.md)\n"
    "      --sm N                CUDA architecture: 80 (default) or 90\n"
    "      --matmul-precision P  highest (default: fp32 GEMMs, JAX's \"highest\") or tf32\n"
    "                            (cuBLAS on TF32 tensor cores, JAX's GPU default); kept\n"
    "                            in the plan; a CPU plan accepts it and ignores it\n"
    "      --dump-ir DIR         write the IR after every pass to DIR/NN-pass.kir\n"
    "      --print-ir-after-all  print the IR after every pass to stderr\n"
    "  run PLAN                run a plan\n"
    "      --input X.npy         model input (repeat for several inputs, in order)\n"
    "      --output Y.npy        where to write an output (repeat, in order)\n"
    "      --print               print the outputs\n"
    "      --initial-weights W   predict with a checkpoint's weights (--save-weights of a\n"
    "                            training plan)\n"
    "      --threads N           threads for kernels and BLAS (default: all cores)\n"
    "      --cache-dir DIR       keep the compiled code of plans in DIR and reuse it (default:\n"
    "                            $KDC_CACHE_DIR; none when unset; docs/runtime.md)\n"
    "      --collective-timeout S  fail a collective whose members do not all arrive\n"
    "                            within S seconds, naming the missing device (default 60)\n"
    "      --coordinator H:P --num-processes N --process-id I [--job-token-file F]\n"
    "                            this process's place in a multi-process job (or\n"
    "                            KDC_COORDINATOR_ADDRESS, KDC_NUM_PROCESSES, KDC_PROCESS_ID);\n"
    "                            under `mpirun -np N kdc run ...` MPI supplies them, else\n"
    "                            process 0 listens at H:P and the others connect (TCP);\n"
    "                            each process runs its share of the devices, process 0\n"
    "                            writes the outputs; --fit/--evaluate too; under Slurm\n"
    "                            (`srun kdc run ...`) they come from SLURM_* (docs/processes.md);\n"
    "                            the members prove they hold the job token of F (or\n"
    "                            KDC_JOB_TOKEN_FILE, KDC_JOB_TOKEN): required beyond loopback\n"
    "      --local-device-ids 0,1  the GPUs this process's devices use (KDC_LOCAL_DEVICE_IDS)\n"
    "  run PLAN --fit          train: Keras' Model.fit over .npy arrays (plan compiled with --loss)\n"
    "      --x X.npy             model input (one per input, in input order)\n"
    "      --y Y.npy             labels (one per trained output, in output order, or\n"
    "                            --y NAME=Y.npy naming the output)\n"
    "      --epochs E            epochs (default 1)\n"
    "      --batch-size B        rows per step, at most the compiled --batch (default: it)\n"
    "      --shuffle             shuffle the rows every epoch\n"
    "      --seed S              seed of the shuffles (default 0)\n"
    "      --validation-split F  hold out the last fraction F of the rows (val_loss)\n"
    "      --history H.json      write Keras' History.history (+ every batch loss)\n"
    "      --save-weights W      the trained weights: W.safetensors (with the optimizer\n"
    "                            state) or W.weights.h5 (Keras' load_weights())\n"
    "      --save-optimizer      a .weights.h5 also gets the optimizer's variables\n"
    "      --save-model M.keras  a Keras 3 archive (config, compile_config, weights,\n"
    "                            optimizer) that keras.saving.load_model() opens\n"
    "      --initial-weights W   start from these (.safetensors, .keras, .weights.h5;\n"
    "                            optimizer state included; any mesh wrote them)\n"
    "      --predict X2.npy --output P.npy  then predict with the trained weights (one\n"
    "                            --predict per model input, one --output per output)\n"
    "      --quiet               no progress output\n"
    "      --threads, --cache-dir, --collective-timeout, --coordinator ...  as for run\n"
    "  run PLAN --evaluate     Keras' Model.evaluate: the mean loss over --x / --y\n"
    "      --x, --y, --batch-size, --initial-weights, --threads ...  as for --fit\n"
    "  inspect FILE            describe a plan (mesh, shardings, collectives with groups and\n"
    "                          bytes, memory per device, steps, IR) or summarise a model\n"
    "      --explain NAME        why NAME (weight path, input, output, layer) is sharded so\n"
    "      --sharding NAME       picture of how tensor NAME is laid out over the devices\n"
    "      --collectives         only the mesh and every collective (groups, bytes)\n"
    "      --ptx                 print the PTX of a plan compiled with --target cuda\n"
    "  devices                 CPU cores and virtual meshes, the GPUs the CUDA driver sees\n"
    "                          (or why none), this process's place in a job and where each\n"
    "                          value came from; --json; takes run's placement flags\n"
    "\n"
    "  kdc --help | --version\n"
    "\n"
    "A plan is a program: run only plans you built or trust.\n";

int main(int argc, char **argv) {
  kdc_rt_blas_select_core(argv); /* runtime/blas_core.c: may execute kdc again */
  kdc_trace("main entered (%s)", argc > 1 ? argv[1] : "");
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
    printf("kdc %s\n", KDC_VERSION_STRING);
    return 0;
  }
  if (strcmp(argv[1], "compile") == 0) return kdc_cmd_compile(argc - 2, argv + 2);
  if (strcmp(argv[1], "run") == 0) {
    int rc = kdc_cmd_run(argc - 2, argv + 2);
    kdc_trace("exit (status %d)", rc);
    return rc;
  }
  if (strcmp(argv[1], "inspect") == 0) return kdc_cmd_inspect(argc - 2, argv + 2);
  if (strcmp(argv[1], "devices") == 0) return kdc_cmd_devices(argc - 2, argv + 2);
  return cli_fail(KDC_ERR(KDC_INVALID_INPUT, "unknown command \"%s\" (see kdc --help)", argv[1]));
}
