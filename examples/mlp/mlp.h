/* mlp: a small multi-layer perceptron trained with full-batch SGD, as weft
 * host kernels. The workload of the project's demo.
 *
 * Model: logits = relu(X·W1 + b1)·W2 + b2, softmax cross-entropy loss,
 * float32 throughout, on a deterministic synthetic data set (K Gaussian-ish
 * clusters in D dimensions, drawn from a seeded splitmix64).
 *
 * Two phases:
 *   - mlp_create registers the kernels, creates every buffer (weights,
 *     activations, gradients, data) and uploads the data and the initial
 *     weights;
 *   - mlp_step_enqueue submits one training step (forward, backward, SGD
 *     update, plus an evaluation forward on a held-out set) through a launch
 *     function: weft_launch by default, or any recorder with the same shape
 *     (e.g. to capture the step as a task graph). It never blocks.
 * Reads (mlp_loss, mlp_accuracy, mlp_eval_accuracy, mlp_params_read) block.
 *
 * The kernels are public so that tests and other programs can register and
 * launch them on their own; each validates the byte sizes of its bindings
 * against its shape scalars and fails with InvalidArgument (never crashes)
 * when they disagree. Each call runs one block: rows (or, for the column
 * reductions, columns) are split evenly across the blocks of the grid. */
#ifndef WEFT_EXAMPLES_MLP_H
#define WEFT_EXAMPLES_MLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/weft.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- configuration, data and parameters on the host ------------------------------------- */

typedef struct mlp_config {
  uint32_t n;      /* training points (512) */
  uint32_t n_eval; /* held-out evaluation points (256) */
  uint32_t d;      /* features (16) */
  uint32_t h;      /* hidden units (64) */
  uint32_t k;      /* classes (4) */
  uint32_t blocks; /* blocks of every row-split launch (4) */
  float lr;        /* SGD learning rate (0.1) */
  uint64_t seed;   /* data and weight initialisation */
} mlp_config;

/* The defaults above. */
void mlp_config_default(mlp_config *cfg);
/* NULL, or an InvalidArgument saying which field is out of range. */
weft_status mlp_config_check(const mlp_config *cfg);

/* splitmix64: the only source of randomness (no rand()). */
uint64_t mlp_rng_next(uint64_t *state);
/* Uniform in [0, 1) with 24 bits. */
float mlp_rng_uniform(uint64_t *state);
/* Gaussian-ish (Irwin-Hall of 4 uniforms, scaled to unit variance). */
float mlp_rng_normal(uint64_t *state);

/* The data set: x is rows x d (row-major), y its labels in [0, k).
 * |eval| false: the training set (cfg->n rows), true: the held-out set
 * (cfg->n_eval rows, the same clusters, other draws). */
void mlp_dataset_generate(const mlp_config *cfg, bool eval, float *x, int32_t *y);

/* Parameters on the host: w1 is d x h, b1 h, w2 h x k, b2 k (row-major). */
typedef struct mlp_params {
  float *w1, *b1, *w2, *b2;
} mlp_params;

/* Allocates (zeroed) / frees the four arrays; alloc returns false when
 * memory runs out (nothing left allocated). */
bool mlp_params_alloc(const mlp_config *cfg, mlp_params *p);
void mlp_params_free(mlp_params *p);
/* Glorot-uniform weights from cfg->seed, zero biases. */
void mlp_params_init(const mlp_config *cfg, mlp_params *p);

/* The pure-C reference of one training step on plain host arrays: the same
 * forward, backward and SGD update as mlp_step_enqueue, written with plain
 * loops. Updates |p| in place; |loss| and |acc| (each may be NULL) receive the
 * mean loss and the training accuracy of the forward pass (before the
 * update). Returns false only when its scratch memory cannot be allocated. */
bool mlp_reference_step(const mlp_config *cfg, const float *x, const int32_t *y, mlp_params *p,
                        float *loss, float *acc);

/* ---- the kernels ------------------------------------------------------------------------ */

/* Shape scalars (passed by value as the launch's scalar bytes). */
typedef struct mlp_mm_args {
  uint32_t m, k, n; /* C is m x n; the inner dimension is k */
} mlp_mm_args;
typedef struct mlp_rc_args {
  uint32_t rows, cols;
} mlp_rc_args;
typedef struct mlp_scaled_args {
  uint32_t rows, cols;
  float scale; /* xent_grad: 1/rows for a mean loss; sgd: the learning rate */
} mlp_scaled_args;
typedef struct mlp_check_args {
  uint32_t rows, cols;
  uint32_t fail; /* non-zero: fail with Generic "injected failure" */
  uint32_t pad;
  uint64_t step; /* named in the error */
} mlp_check_args;

/* Every kernel has the weft_host_kernel_fn shape; |user| is unused. Bindings
 * in order, (R) read, (W) write, (RW) both; shapes row-major float32 unless
 * said otherwise. */

/* C = A·B: A m x k (R), B k x n (R), C m x n (W). mlp_mm_args. Rows of C split. */
weft_status mlp_k_matmul(const weft_kernel_ctx *ctx, void *user);
/* C = A^T·B: A k x m (R), B k x n (R), C m x n (W). mlp_mm_args. Rows of C split. */
weft_status mlp_k_matmul_tn(const weft_kernel_ctx *ctx, void *user);
/* C = A·B^T: A m x k (R), B n x k (R), C m x n (W). mlp_mm_args. Rows of C split. */
weft_status mlp_k_matmul_nt(const weft_kernel_ctx *ctx, void *user);
/* X += b on every row: X rows x cols (RW), b cols (R). mlp_rc_args. */
weft_status mlp_k_bias_add(const weft_kernel_ctx *ctx, void *user);
/* Y = max(X, 0): X (R), Y (W), both rows x cols. mlp_rc_args. */
weft_status mlp_k_relu(const weft_kernel_ctx *ctx, void *user);
/* G = A > 0 ? G : 0: G rows x cols (RW), A the ReLU's output (R). mlp_rc_args. */
weft_status mlp_k_relu_grad(const weft_kernel_ctx *ctx, void *user);
/* Softmax cross-entropy: logits rows x cols (R), labels int32 rows (R),
 * probabilities rows x cols (W), per-row loss rows (W). mlp_rc_args (cols:
 * classes). A label outside [0, cols) is InvalidArgument. */
weft_status mlp_k_softmax_xent(const weft_kernel_ctx *ctx, void *user);
/* out[0] = mean of x: x rows x cols (R), out one float (W). mlp_rc_args.
 * Block 0 computes; other blocks do nothing. */
weft_status mlp_k_mean(const weft_kernel_ctx *ctx, void *user);
/* dlogits = (probs - onehot(labels)) * scale: probs rows x cols (R), labels
 * int32 rows (R), dlogits rows x cols (W). mlp_scaled_args. */
weft_status mlp_k_xent_grad(const weft_kernel_ctx *ctx, void *user);
/* db = column sums of G: G rows x cols (R), db cols (W). mlp_rc_args.
 * Columns split across blocks. */
weft_status mlp_k_bias_grad(const weft_kernel_ctx *ctx, void *user);
/* W -= scale * G: W rows x cols (RW), G rows x cols (R). mlp_scaled_args
 * (scale: the learning rate). */
weft_status mlp_k_sgd(const weft_kernel_ctx *ctx, void *user);
/* Fault injection and a NaN guard: X rows x cols (RW, unchanged). Fails with
 * Generic "injected failure at step N" when args.fail is set, with
 * Validation when a value is not finite. mlp_check_args. */
weft_status mlp_k_check_finite(const weft_kernel_ctx *ctx, void *user);
/* out[0] = fraction of rows whose argmax (first maximum) equals the label:
 * logits rows x cols (R), labels int32 rows (R), out one float (W).
 * mlp_rc_args. Block 0 computes; other blocks do nothing. */
weft_status mlp_k_accuracy(const weft_kernel_ctx *ctx, void *user);

/* ---- the model on a device ---------------------------------------------------------------- */

typedef struct mlp mlp;

/* How a step submits one launch. */
typedef weft_status (*mlp_launch_fn)(void *ctx, weft_stream_id stream, weft_kernel k,
                                     const uint32_t grid[3], const uint32_t block[3],
                                     const weft_binding *b, size_t nb, const void *scalars,
                                     size_t scalar_bytes);

/* weft_launch with |ctx| the weft_device. */
weft_status mlp_launch_eager(void *ctx, weft_stream_id stream, weft_kernel k,
                             const uint32_t grid[3], const uint32_t block[3], const weft_binding *b,
                             size_t nb, const void *scalars, size_t scalar_bytes);

#define MLP_STREAMS 4
/* Where a step runs: s[0] the training forward and the layer-1 backward (the
 * critical path), s[1] the loss and accuracy reductions and the layer-2
 * weight gradient and update, s[2] the bias gradients and updates, s[3] the
 * evaluation forward. Streams may repeat (a single stream is valid). |launch|
 * NULL: mlp_launch_eager on the model's device (|launch_ctx| ignored). The
 * scalars a step passes live on the caller's stack: a recorder copies them. */
typedef struct mlp_streams {
  weft_stream_id s[MLP_STREAMS];
  mlp_launch_fn launch;
  void *launch_ctx;
} mlp_streams;

/* Streams base .. base+3, eager launches. */
void mlp_streams_default(mlp_streams *st, weft_stream_id base);

/* Registers the kernels (one per role of a step, named like
 * "bwd1.matmul_tn_dw1"), creates the buffers on |dev| (streams 0..3) and
 * uploads the data sets and the initial weights. NULL cfg: defaults. *out is
 * NULL on failure (no buffer is left; kernels registered so far stay). */
weft_status mlp_create(weft_device *dev, const mlp_config *cfg, mlp **out);
/* Releases every buffer and frees the model (NULL: no-op). Kernels stay
 * registered on the device (weft has no kernel release); the device's close
 * frees them. */
void mlp_destroy(mlp *m);
const mlp_config *mlp_get_config(const mlp *m);

/* Submits one step (MLP_STEP_LAUNCHES launches), in program order:
 *   s3: evaluation forward on the held-out set (reads the weights before the update)
 *   s0: Z1 = X·W1, Z1 += b1, A1 = relu(Z1), Z2 = A1·W2, Z2 += b2, check_finite(Z2),
 *       softmax_xent(Z2, Y) -> P, row losses
 *   s1: loss = mean(row losses), acc = accuracy(Z2, Y)
 *   s0: dZ2 = (P - onehot(Y)) / n
 *   s1: dW2 = A1^T·dZ2           s2: db2 = colsum(dZ2)
 *   s0: dA1 = dZ2·W2^T
 *   s1: W2 -= lr dW2             s2: b2 -= lr db2
 *   s0: dA1 = relu_grad(dA1, A1), dW1 = X^T·dA1
 *   s2: db1 = colsum(dA1)
 *   s0: W1 -= lr dW1             s2: b1 -= lr db1
 * No call blocks; the executor orders the streams where buffers cross them.
 * Returns the first launch error (argument errors only); the launches before
 * it stay submitted. */
#define MLP_STEP_LAUNCHES 26u
weft_status mlp_step_enqueue(mlp *m, const mlp_streams *streams);

/* The mean training loss and training accuracy computed by the latest step
 * (its forward pass, before its update); blocking reads. A step whose
 * forward failed reports the read's Several{Unwritten} error. */
weft_status mlp_loss(mlp *m, float *loss);
weft_status mlp_accuracy(mlp *m, float *acc);
/* The held-out accuracy of the latest step's evaluation branch. */
weft_status mlp_eval_accuracy(mlp *m, float *acc);
/* Reads the current weights into |p| (allocated by mlp_params_alloc). */
weft_status mlp_params_read(mlp *m, mlp_params *p);
/* Writes |p| as the current weights (e.g. to restore after a failed step). */
weft_status mlp_params_write(mlp *m, const mlp_params *p);

/* on: the next step's check_finite launch (right after the logits, before the
 * loss) fails with Generic "injected failure at step N". Everything
 * downstream of the logits is skipped and carries that failure (the loss, the
 * training accuracy, every gradient and every weight); the evaluation branch
 * on s3, which reads only the weights before the update and the held-out
 * set, completes. The flag clears once a step has consumed it. */
weft_status mlp_inject_failure(mlp *m, bool on);

/* Step counter (steps enqueued so far). */
uint64_t mlp_steps(const mlp *m);
/* The name a kernel of this model was registered under, or NULL. */
const char *mlp_kernel_name(const mlp *m, weft_kernel k);

/* Buffers a caller may read directly (e.g. to show the evaluation branch is
 * independent of an injected failure). */
typedef enum mlp_buffer_id {
  MLP_BUF_W1,
  MLP_BUF_B1,
  MLP_BUF_W2,
  MLP_BUF_B2,
  MLP_BUF_LOSS,
  MLP_BUF_ACC,
  MLP_BUF_EVAL_ACC,
  MLP_BUF_EVAL_LOGITS,
  MLP_BUF_LOGITS,
} mlp_buffer_id;
/* The handle (zero id for an unknown |which|). */
weft_buffer mlp_buffer(const mlp *m, mlp_buffer_id which);

#ifdef __cplusplus
}
#endif
#endif
