// device_check.cu - GPU checks and bandwidth benchmark of pyspec's CUDA back end through
// the C API alone (no Python packages needed on the device machine).
//
//   device_check check  [out.json]   GPU tokens against the portable-draw rules implemented
//                                    plainly (tests/cuda_emu/spec_reference.h) and against
//                                    the CPU library, over random rows: every dtype,
//                                    mode (greedy, point-mass, dense q, sparse q), parameter
//                                    set, ragged k; device-side error reports; CUDA graph
//                                    capture and replay.
//   device_check bench  [out.json]   achieved HBM bandwidth of pyspec_cuda_verify_batch
//                                    (logit bytes / kernel time by CUDA events) for batch 1
//                                    and 64, k in {1, 4, 8}, V in {151936, 262144}, f32 and
//                                    bf16, greedy, llama.cpp's sampling defaults and top-p
//                                    alone, against a device-to-device copy; split rows on
//                                    where SPLIT_ROWS=1 (pyspec_cuda_verifier_split_rows).
// The check alternates split rows off and on from one call to the next, so both paths
// meet the same kinds of calls.
//
// Built by run_device_checks.sh: nvcc -O2 device_check.cu -I csrc -L build -lpyspec.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "pyspec.h"
#include "../../tests/cuda_emu/spec_reference.h"

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                       \
        }                                                                                  \
    } while (0)

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static uint16_t to_f16(float f) {
    __half h = __float2half_rn(f);
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

struct Json {
    std::string s = "{";
    bool first = true;
    void raw(const char *k, const std::string &v) {
        s += (first ? "\n  \"" : ",\n  \"") + std::string(k) + "\": " + v;
        first = false;
    }
    void num(const char *k, double v) { char b[64]; snprintf(b, sizeof b, "%.6g", v); raw(k, b); }
    void str(const char *k, const std::string &v) { raw(k, "\"" + v + "\""); }
    std::string done() { return s + "\n}\n"; }
};

static pyspec_sampling_params make_params(int which, uint64_t seed) {
    pyspec_sampling_params p;
    memset(&p, 0, sizeof p);
    p.seed = seed;
    p.top_p = 1.0f;
    p.penalty_repeat = 1.0f;
    switch (which) {
    case 0: p.temperature = 0.0f; break;                                            // greedy
    case 1: p.temperature = 1.0f; break;                                            // plain
    case 2: p.temperature = 0.8f; p.top_k = 40; p.top_p = 0.95f; p.min_p = 0.05f; break; // llama.cpp defaults
    case 3: p.temperature = 1.2f; p.top_p = 0.9f; break;                           // top-p alone
    case 4: p.temperature = 1.0f; p.min_p = 0.1f; break;                           // min-p alone
    case 5: p.temperature = 0.7f; p.top_k = 1; break;                              // top-k 1
    case 6: p.temperature = 1.0f; p.top_k = 5; p.top_p = 0.5f; break;
    case 7: p.temperature = 1.0f; p.top_k = 50; p.penalty_last_n = 64; p.penalty_repeat = 1.3f;
            p.penalty_freq = 0.2f; p.penalty_present = 0.1f; break;                // penalties
    case 8: p.temperature = 0.9f; p.top_p = 0.8f; p.penalty_last_n = -1; p.penalty_repeat = 1.1f; break;
    case 9: p.temperature = 1.1f; p.top_k = 1500; p.top_p = 0.9f; p.min_p = 0.01f; break;   // no short list
    }
    return p;
}
static const int N_PARAMS = 10;
static const char *MODES[4] = { "point", "self", "dense", "sparse" };
static const char *DTYPES[3] = { "f32", "f16", "bf16" };

// Random heavy-tailed rows (a few dominant tokens), optionally quantised to force ties.
// Gumbel(0, 2) from a uniform on the open interval (0, 1). std::extreme_value_distribution<float>
// gave +inf now and then (libstdc++'s generate_canonical<float> can return exactly 1), and
// both back ends rightly refuse such a row, which the sweep then counted as an error.
static float gumbel2(std::mt19937_64 &rng) {
    const double u = ((double)(rng() >> 11) + 0.5) * 0x1.0p-53;
    return (float)(-2.0 * log(-log(u)));
}

static void fill_rows(std::mt19937_64 &rng, float *x, int rows, int V, bool ties) {
    std::uniform_int_distribution<int> tok(0, V - 1);
    std::uniform_real_distribution<float> boost(5.0f, 15.0f);
    for (int r = 0; r < rows; ++r) {
        float *row = x + (size_t)r * V;
        for (int t = 0; t < V; ++t) row[t] = gumbel2(rng);
        for (int j = 0; j < 5; ++j) row[tok(rng)] += boost(rng);
        if (ties) for (int t = 0; t < V; ++t) row[t] = roundf(row[t]);
    }
}

static int check(const char *json_path) {
    std::mt19937_64 rng(12345);
    pyspec_error err;
    const int V_LIST[3] = { 1000, 32000, 151936 };
    const int max_k = 8, max_seqs = 16;
    pyspec_verifier *cpu = NULL;
    pyspec_cuda_verifier *gpu = NULL;
    if (pyspec_verifier_create(151936, 1, &cpu, &err)) { printf("cpu create: %s\n", err.message); return 2; }
    if (pyspec_cuda_verifier_create(151936, max_seqs, max_seqs * (max_k + 1), 0, &gpu, &err)) {
        printf("cuda create: %s\n", err.message); return 2;
    }
    long long split_calls = 0;
    const size_t max_elems = (size_t)max_seqs * (max_k + 1) * 151936;
    void *d_logits, *d_q, *d_qtok, *d_draft, *d_hist, *d_out, *d_lp, *d_n;
    CK(cudaMalloc(&d_logits, max_elems * 4));
    CK(cudaMalloc(&d_q, (size_t)max_seqs * max_k * 151936 * 4));
    CK(cudaMalloc(&d_qtok, (size_t)max_seqs * max_k * 64 * 4));
    CK(cudaMalloc(&d_draft, max_seqs * max_k * 4));
    CK(cudaMalloc(&d_hist, max_seqs * 64 * 4));
    CK(cudaMalloc(&d_out, max_seqs * (max_k + 1) * 4));
    CK(cudaMalloc(&d_lp, max_seqs * (max_k + 1) * 4));
    CK(cudaMalloc(&d_n, max_seqs * 8));
    long long cases = 0, mismatches[3][4] = { { 0 } }, runs[3][4] = { { 0 } }, errors = 0;
    long long mism_by_params[N_PARAMS] = { 0 }, runs_by_params[N_PARAMS] = { 0 };
    long long ref_mismatches = 0, greedy_cpu_mismatches = 0;
    double max_lp_diff = 0.0;
    std::vector<std::string> examples;
    for (int vi = 0; vi < 3; ++vi) {
        const int V = V_LIST[vi];
        printf("identity sweep at V = %d (so far: %lld cases, %lld vs reference, %lld greedy vs CPU)\n", V, cases,
               ref_mismatches, greedy_cpu_mismatches);
        fflush(stdout);
        const int trials = vi == 2 ? 1 : vi == 1 ? 3 : 6;
        for (int dt = 0; dt < 3; ++dt)
            for (int mode = 0; mode < 4; ++mode)
                for (int pi = 0; pi < N_PARAMS; ++pi)
                    for (int trial = 0; trial < trials; ++trial) {
                        const int n_seqs = 1 + (int)(rng() % 4);
                        std::vector<int> ks(n_seqs);
                        int rows = 0;
                        for (int s = 0; s < n_seqs; ++s) { ks[s] = (int)(rng() % (max_k + 1)); rows += ks[s] + 1; }
                        std::vector<float> f((size_t)rows * V);
                        fill_rows(rng, f.data(), rows, V, trial % 3 == 2);
                        std::vector<uint16_t> h16((size_t)rows * V);
                        const void *host = f.data();
                        if (dt > 0) {
                            for (size_t j = 0; j < f.size(); ++j) h16[j] = dt == 1 ? to_f16(f[j]) : to_bf16(f[j]);
                            host = h16.data();
                        }
                        const size_t elem = dt == 0 ? 4 : 2;
                        CK(cudaMemcpy(d_logits, host, (size_t)rows * V * elem, cudaMemcpyHostToDevice));
                        // drafts, q, histories per sequence
                        std::vector<int32_t> drafts, qtok, hist;
                        std::vector<float> q, qs;
                        std::vector<pyspec_sequence> hs(n_seqs), ds(n_seqs);
                        std::vector<pyspec_draft_probs> hdp(n_seqs), ddp(n_seqs);
                        std::vector<int32_t> out_cpu((size_t)rows);
                        std::vector<float> lp_cpu((size_t)rows);
                        std::vector<int64_t> n_cpu(n_seqs);
                        size_t dpos = 0, qpos = 0, qspos = 0, hpos = 0;
                        drafts.resize((size_t)rows); q.resize(mode == 2 ? (size_t)rows * V : 1);
                        qtok.resize((size_t)rows * 16); qs.resize((size_t)rows * 16); hist.resize((size_t)n_seqs * 20);
                        int row0 = 0;
                        for (int s = 0; s < n_seqs; ++s) {
                            const int k = ks[s];
                            for (int i = 0; i < k; ++i) {
                                int32_t d;
                                if (mode == 1) { // the row argmax
                                    const float *r = f.data() + (size_t)(row0 + i) * V;
                                    d = (int32_t)(std::max_element(r, r + V) - r);
                                } else {
                                    d = (int32_t)(rng() % V);
                                }
                                drafts[dpos + i] = d;
                                if (mode == 2) { // dense q: random, normalised, positive at d
                                    float *qr = q.data() + qpos + (size_t)i * V, sum = 0;
                                    for (int t = 0; t < V; ++t) { qr[t] = (float)((rng() % 1000) * ((rng() % 8) == 0)); sum += qr[t]; }
                                    qr[d] += 100.0f; sum += 100.0f;
                                    for (int t = 0; t < V; ++t) qr[t] /= sum;
                                } else if (mode == 3) { // sparse: 16 entries, the first is d
                                    float sum = 0;
                                    for (int j = 0; j < 16; ++j) {
                                        qtok[qspos + (size_t)i * 16 + j] = j == 0 ? d : (int32_t)(rng() % V);
                                        qs[qspos + (size_t)i * 16 + j] = 1.0f + (float)(rng() % 100);
                                        sum += qs[qspos + (size_t)i * 16 + j];
                                    }
                                    for (int j = 0; j < 16; ++j) qs[qspos + (size_t)i * 16 + j] /= sum;
                                }
                            }
                            for (int j = 0; j < 20; ++j) hist[hpos + j] = (int32_t)(rng() % V);
                            pyspec_sequence &h = hs[s];
                            memset(&h, 0, sizeof h);
                            h.target_logits = (const char *)host + (size_t)row0 * V * elem;
                            h.logits_row_stride = V;
                            h.draft_tokens = drafts.data() + dpos;
                            h.n_draft = k;
                            h.params = make_params(pi, 1000 + trial * 31 + s);
                            h.params.penalty_history = hist.data() + hpos;
                            h.params.n_penalty_history = 20;
                            h.position = (int64_t)(rng() % 1000000);
                            h.out_tokens = out_cpu.data() + row0;
                            h.out_logprobs = lp_cpu.data() + row0;
                            h.out_n_accepted = &n_cpu[s];
                            if (mode >= 2) {
                                hdp[s].probs = mode == 2 ? q.data() + qpos : qs.data() + qspos;
                                hdp[s].tokens = mode == 3 ? qtok.data() + qspos : NULL;
                                hdp[s].row_stride = mode == 2 ? V : 16;
                                hdp[s].n_per_row = mode == 3 ? 16 : 0;
                                h.draft_probs = &hdp[s];
                            }
                            pyspec_sequence &d = ds[s];
                            d = h;
                            d.target_logits = (const char *)d_logits + (size_t)row0 * V * elem;
                            d.draft_tokens = (const int32_t *)d_draft + dpos;
                            d.params.penalty_history = (const int32_t *)d_hist + hpos;
                            d.out_tokens = (int32_t *)d_out + row0;
                            d.out_logprobs = (float *)d_lp + row0;
                            d.out_n_accepted = (int64_t *)d_n + s;
                            if (mode >= 2) {
                                ddp[s] = hdp[s];
                                ddp[s].probs = mode == 2 ? (const float *)d_q + qpos : (const float *)d_q + qspos;
                                ddp[s].tokens = mode == 3 ? (const int32_t *)d_qtok + qspos : NULL;
                                d.draft_probs = &ddp[s];
                            }
                            dpos += k; qpos += (size_t)k * V; qspos += (size_t)k * 16; hpos += 20; row0 += k + 1;
                        }
                        CK(cudaMemcpy(d_draft, drafts.data(), dpos * 4, cudaMemcpyHostToDevice));
                        CK(cudaMemcpy(d_hist, hist.data(), hpos * 4, cudaMemcpyHostToDevice));
                        if (mode == 2) CK(cudaMemcpy(d_q, q.data(), qpos * 4, cudaMemcpyHostToDevice));
                        if (mode == 3) {
                            CK(cudaMemcpy(d_q, qs.data(), qspos * 4, cudaMemcpyHostToDevice));
                            CK(cudaMemcpy(d_qtok, qtok.data(), qspos * 4, cudaMemcpyHostToDevice));
                        }
                        const int32_t dtype = dt == 0 ? PYSPEC_F32 : dt == 1 ? PYSPEC_F16 : PYSPEC_BF16;
                        pyspec_error e1, e2;
                        int st1 = pyspec_verify_batch(cpu, hs.data(), n_seqs, V, dtype, 1, &e1);
                        const int split = (int)(cases % 2);
                        pyspec_cuda_verifier_split_rows(gpu, split, NULL);
                        split_calls += split;
                        int st2 = pyspec_cuda_verify_batch_sync(gpu, ds.data(), n_seqs, V, dtype, NULL, &e2);
                        ++cases;
                        ++runs[dt][mode];
                        ++runs_by_params[pi];
                        if (st1 || st2) {
                            ++errors;
                            if (examples.size() < 20)
                                examples.push_back(std::string("status cpu ") + std::to_string(st1) + " '" + e1.message +
                                                   "' gpu " + std::to_string(st2) + " '" + e2.message + "'");
                            continue;
                        }
                        std::vector<int32_t> out_gpu((size_t)rows);
                        std::vector<float> lp_gpu((size_t)rows);
                        std::vector<int64_t> n_gpu(n_seqs);
                        CK(cudaMemcpy(out_gpu.data(), d_out, rows * 4, cudaMemcpyDeviceToHost));
                        CK(cudaMemcpy(lp_gpu.data(), d_lp, rows * 4, cudaMemcpyDeviceToHost));
                        CK(cudaMemcpy(n_gpu.data(), d_n, n_seqs * 8, cudaMemcpyDeviceToHost));
                        /* the primary check: the GPU against the rules themselves */
                        row0 = 0;
                        for (int s = 0; s < n_seqs; ++s) {
                            RefSeq ref = ref_seq(hs[s], V, dtype);
                            bool ok = ref.status == 0 && ref.n_accepted == n_gpu[s];
                            for (int64_t i = 0; ok && i <= n_gpu[s]; ++i) ok = out_gpu[row0 + i] == ref.tokens[i];
                            if (!ok) {
                                ++ref_mismatches;
                                if (examples.size() < 20) {
                                    char b[256];
                                    snprintf(b, sizeof b, "REFERENCE V %d %s %s params %d seq %d: n ref %lld gpu %lld, first tokens ref %d gpu %d",
                                             V, DTYPES[dt], MODES[mode], pi, s, (long long)ref.n_accepted, (long long)n_gpu[s],
                                             ref.tokens.empty() ? -1 : ref.tokens[0], out_gpu[row0]);
                                    examples.push_back(b);
                                }
                            }
                            row0 += ks[s] + 1;
                        }
                        bool same = true;
                        row0 = 0;
                        for (int s = 0; s < n_seqs; ++s) {
                            if (n_gpu[s] != n_cpu[s]) same = false;
                            else
                                for (int64_t i = 0; i <= n_cpu[s]; ++i) {
                                    if (out_gpu[row0 + i] != out_cpu[row0 + i]) same = false;
                                    double dl = fabs((double)lp_gpu[row0 + i] - lp_cpu[row0 + i]);
                                    if (dl > max_lp_diff) max_lp_diff = dl;
                                }
                            if (!same && examples.size() < 20) {
                                char b[256];
                                snprintf(b, sizeof b, "V %d %s %s params %d seq %d: n cpu %lld gpu %lld, token cpu %d gpu %d",
                                         V, DTYPES[dt], MODES[mode], pi, s, (long long)n_cpu[s], (long long)n_gpu[s],
                                         out_cpu[row0 + std::min(n_cpu[s], n_gpu[s])], out_gpu[row0 + std::min(n_cpu[s], n_gpu[s])]);
                                examples.push_back(b);
                                break;
                            }
                            row0 += ks[s] + 1;
                        }
                        if (!same) { ++mismatches[dt][mode]; ++mism_by_params[pi]; if (pi == 0) ++greedy_cpu_mismatches; }
                    }
    }
    // Device-side errors: NaN in row 1 of a 3-row greedy sequence whose drafts are accepted.
    {
        const int V = 100;
        std::vector<float> f(3 * V, 0.0f);
        f[V + 7] = NAN;
        int32_t dr[2] = { 0, 0 };
        CK(cudaMemcpy(d_logits, f.data(), f.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_draft, dr, 8, cudaMemcpyHostToDevice));
        pyspec_sequence d;
        memset(&d, 0, sizeof d);
        d.target_logits = d_logits; d.logits_row_stride = V; d.draft_tokens = (int32_t *)d_draft; d.n_draft = 2;
        d.params = make_params(0, 1); d.out_tokens = (int32_t *)d_out; d.out_n_accepted = (int64_t *)d_n;
        int st = pyspec_cuda_verify_batch_sync(gpu, &d, 1, V, PYSPEC_F32, NULL, &err);
        printf("NaN error check: status %d message '%s'\n", st, err.message);
        if (st != PYSPEC_ERR_LOGITS || !strstr(err.message, "row 1 holds NaN at vocabulary index 7")) ++errors;
        dr[1] = 150;
        f[V + 7] = 0.0f;
        CK(cudaMemcpy(d_logits, f.data(), f.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_draft, dr, 8, cudaMemcpyHostToDevice));
        st = pyspec_cuda_verify_batch_sync(gpu, &d, 1, V, PYSPEC_F32, NULL, &err);
        printf("token error check: status %d message '%s'\n", st, err.message);
        if (st != PYSPEC_ERR_TOKEN) ++errors;
        // graph capture and replay
        dr[1] = 0;
        CK(cudaMemcpy(d_draft, dr, 8, cudaMemcpyHostToDevice));
        cudaStream_t stream;
        CK(cudaStreamCreate(&stream));
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        int cst = pyspec_cuda_verify_batch(gpu, &d, 1, V, PYSPEC_F32, stream, &err);
        CK(cudaStreamEndCapture(stream, &graph));
        CK(cudaGraphInstantiate(&exec, graph, 0));
        CK(cudaMemset(d_out, 0xff, 12));
        CK(cudaGraphLaunch(exec, stream));
        int gst = pyspec_cuda_verifier_last_error(gpu, stream, &err);
        int32_t out[3];
        int64_t n;
        CK(cudaMemcpy(out, d_out, 12, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(&n, d_n, 8, cudaMemcpyDeviceToHost));
        printf("graph capture: capture status %d, replay status %d, n_accepted %lld tokens %d %d %d\n", cst, gst,
               (long long)n, out[0], out[1], out[2]);
        if (cst || gst || n != 2 || out[0] != 0 || out[1] != 0 || out[2] != 0) ++errors;
    }
    Json j;
    j.num("cases", (double)cases);
    j.num("errors", (double)errors);
    j.num("max_logprob_abs_diff", max_lp_diff);
    j.num("calls_with_split_rows", (double)split_calls);
    j.num("gpu_vs_reference_mismatches (must be 0)", (double)ref_mismatches);
    j.num("greedy_gpu_vs_cpu_mismatches (must be 0)", (double)greedy_cpu_mismatches);
    std::string m = "{";
    for (int dt = 0; dt < 3; ++dt)
        for (int mode = 0; mode < 4; ++mode) {
            char b[128];
            snprintf(b, sizeof b, "%s\"%s/%s\": [%lld, %lld]", m.size() > 1 ? ", " : "", DTYPES[dt], MODES[mode],
                     mismatches[dt][mode], runs[dt][mode]);
            m += b;
        }
    j.raw("mismatches_of_runs", m + "}");
    std::string mp = "[";
    for (int pi = 0; pi < N_PARAMS; ++pi) {
        char b[64];
        snprintf(b, sizeof b, "%s[%lld, %lld]", pi ? ", " : "", mism_by_params[pi], runs_by_params[pi]);
        mp += b;
    }
    j.raw("mismatches_of_runs_by_params (0 = greedy; all must be 0)", mp + "]");
    std::string ex = "[";
    for (size_t i = 0; i < examples.size(); ++i) ex += (i ? ", \"" : "\"") + examples[i] + "\"";
    j.raw("examples", ex + "]");
    std::string out = j.done();
    printf("%s", out.c_str());
    if (json_path) { FILE *fp = fopen(json_path, "w"); if (fp) { fputs(out.c_str(), fp); fclose(fp); } }
    pyspec_cuda_verifier_free(gpu);
    pyspec_verifier_free(cpu);
    /* The CPU draws by the same portable rules: any GPU-vs-CPU difference, sampled or
     * greedy, fails the check. */
    long long cpu_mismatches = 0;
    for (int dt = 0; dt < 3; ++dt)
        for (int mode = 0; mode < 4; ++mode) cpu_mismatches += mismatches[dt][mode];
    return (errors || ref_mismatches || cpu_mismatches) ? 1 : 0;
}

static double copy_bandwidth(size_t bytes) {
    void *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemset(a, 1, bytes));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
    const int reps = 20;
    CK(cudaEventRecord(e0));
    for (int r = 0; r < reps; ++r) CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaFree(a));
    CK(cudaFree(b));
    return 2.0 * bytes * reps / (ms * 1e-3) / 1e9; // read + write
}

static int bench(const char *json_path) {
    pyspec_error err;
    const int V_LIST[2] = { 151936, 262144 };
    const int K_LIST[3] = { 1, 4, 8 };
    const int B_LIST[2] = { 1, 64 };
    pyspec_cuda_verifier *gpu = NULL;
    if (pyspec_cuda_verifier_create(262144, 64, 64 * 9, 0, &gpu, &err)) { printf("create: %s\n", err.message); return 2; }
    const char *split_env = getenv("SPLIT_ROWS");
    const int split_rows = split_env && atoi(split_env) != 0;
    pyspec_cuda_verifier_split_rows(gpu, split_rows, NULL);
    printf("split rows: %s\n", split_rows ? "on" : "off");
    const size_t max_bytes = (size_t)64 * 9 * 262144 * 4;
    void *d_logits, *d_draft, *d_out, *d_n;
    CK(cudaMalloc(&d_logits, max_bytes));
    CK(cudaMalloc(&d_draft, 64 * 8 * 4));
    CK(cudaMalloc(&d_out, 64 * 9 * 4));
    CK(cudaMalloc(&d_n, 64 * 8));
    double copy_bw = copy_bandwidth((size_t)1 << 30);
    printf("device-to-device copy: %.1f GB/s (read + write)\n", copy_bw);
    std::string rows = "[";
    std::mt19937_64 rng(7);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int vi = 0; vi < 2; ++vi)
        for (int dt = 0; dt < 2; ++dt) {
            const int V = V_LIST[vi];
            const size_t elem = dt == 0 ? 4 : 2;
            const int32_t dtype = dt == 0 ? PYSPEC_F32 : PYSPEC_BF16;
            { // fill: random rows, converted on the host
                const size_t n = (size_t)64 * 9 * V;
                std::vector<float> f(n);
                std::normal_distribution<float> nd(0.0f, 3.0f);
                for (size_t i = 0; i < n; ++i) f[i] = nd(rng);
                if (dt == 0) CK(cudaMemcpy(d_logits, f.data(), n * 4, cudaMemcpyHostToDevice));
                else {
                    std::vector<uint16_t> h(n);
                    for (size_t i = 0; i < n; ++i) h[i] = to_bf16(f[i]);
                    CK(cudaMemcpy(d_logits, h.data(), n * 2, cudaMemcpyHostToDevice));
                }
            }
            for (int pi : { 0, 2, 3 }) { // greedy, llama.cpp's defaults, top-p alone
                const char *params_name = pi == 0 ? "greedy" : pi == 2 ? "top_k40_top_p0.95_min_p0.05_T0.8" : "top_p0.9_T1.2";
                const char *params_label = pi == 0 ? "greedy" : pi == 2 ? "sample" : "top-p";
                for (int bi = 0; bi < 2; ++bi)
                    for (int ki = 0; ki < 3; ++ki) {
                        const int B = B_LIST[bi], k = K_LIST[ki];
                        std::vector<pyspec_sequence> seqs(B);
                        // drafts: the GPU's own point-mass samples, so every row is read
                        // (greedy: argmax). One call with n_draft = 0 per row finds them.
                        std::vector<pyspec_sequence> probe((size_t)B * k);
                        for (int s = 0; s < B; ++s)
                            for (int i = 0; i < k; ++i) {
                                pyspec_sequence &p = probe[(size_t)s * k + i];
                                memset(&p, 0, sizeof p);
                                p.target_logits = (const char *)d_logits + ((size_t)s * (k + 1) + i) * V * elem;
                                p.logits_row_stride = V;
                                p.params = make_params(pi, 77);
                                p.position = 1000 + i;
                                p.out_tokens = (int32_t *)d_draft + (size_t)s * k + i;
                                p.out_n_accepted = (int64_t *)d_n;
                            }
                        // probe in chunks of 64 sequences (the verifier's max_seqs)
                        for (size_t c = 0; c < probe.size(); c += 64) {
                            size_t n = std::min<size_t>(64, probe.size() - c);
                            if (pyspec_cuda_verify_batch_sync(gpu, probe.data() + c, (int64_t)n, V, dtype, NULL, &err)) {
                                printf("probe failed: %s\n", err.message); return 2;
                            }
                        }
                        for (int s = 0; s < B; ++s) {
                            pyspec_sequence &q = seqs[s];
                            memset(&q, 0, sizeof q);
                            q.target_logits = (const char *)d_logits + (size_t)s * (k + 1) * V * elem;
                            q.logits_row_stride = V;
                            q.draft_tokens = (int32_t *)d_draft + (size_t)s * k;
                            q.n_draft = k;
                            q.params = make_params(pi, 77);
                            q.position = 1000;
                            q.out_tokens = (int32_t *)d_out + (size_t)s * (k + 1);
                            q.out_n_accepted = (int64_t *)d_n + s;
                        }
                        if (pyspec_cuda_verify_batch_sync(gpu, seqs.data(), B, V, dtype, NULL, &err)) {
                            printf("verify failed: %s\n", err.message); return 2;
                        }
                        std::vector<int64_t> nacc(B);
                        CK(cudaMemcpy(nacc.data(), d_n, B * 8, cudaMemcpyDeviceToHost));
                        long long accepted = 0;
                        for (int s = 0; s < B; ++s) accepted += nacc[s];
                        const int reps = B == 1 ? 200 : 20;
                        // (a) plain calls: host staging + 3 launches each
                        CK(cudaEventRecord(e0));
                        for (int r = 0; r < reps; ++r) pyspec_cuda_verify_batch(gpu, seqs.data(), B, V, dtype, NULL, &err);
                        CK(cudaEventRecord(e1));
                        CK(cudaEventSynchronize(e1));
                        float ms_calls;
                        CK(cudaEventElapsedTime(&ms_calls, e0, e1));
                        // (b) the same call captured in a CUDA graph and replayed: device time
                        cudaStream_t st;
                        CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
                        cudaGraph_t graph;
                        cudaGraphExec_t exec;
                        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
                        int cst = pyspec_cuda_verify_batch(gpu, seqs.data(), B, V, dtype, st, &err);
                        CK(cudaStreamEndCapture(st, &graph));
                        if (cst) { printf("capture failed: %s\n", err.message); return 2; }
                        CK(cudaGraphInstantiate(&exec, graph, 0));
                        CK(cudaGraphLaunch(exec, st));
                        CK(cudaStreamSynchronize(st));
                        CK(cudaEventRecord(e0, st));
                        for (int r = 0; r < reps; ++r) CK(cudaGraphLaunch(exec, st));
                        CK(cudaEventRecord(e1, st));
                        CK(cudaEventSynchronize(e1));
                        float ms;
                        CK(cudaEventElapsedTime(&ms, e0, e1));
                        CK(cudaGraphExecDestroy(exec));
                        CK(cudaGraphDestroy(graph));
                        CK(cudaStreamDestroy(st));
                        if (pyspec_cuda_verifier_last_error(gpu, NULL, &err)) { printf("device error: %s\n", err.message); return 2; }
                        const double t = ms * 1e-3 / reps, t_calls = ms_calls * 1e-3 / reps;
                        const double bytes = (double)B * (k + 1) * V * elem;
                        char b[512];
                        snprintf(b, sizeof b,
                                 "%s{\"V\": %d, \"dtype\": \"%s\", \"params\": \"%s\", \"batch\": %d, \"k\": %d, "
                                 "\"accepted\": %lld, \"us_graph_replay\": %.2f, \"us_plain_call\": %.2f, \"logit_bytes\": %.0f, "
                                 "\"GBps\": %.1f, \"fraction_of_copy_bw\": %.3f}",
                                 rows.size() > 1 ? ",\n    " : "\n    ", V, dt ? "bf16" : "f32",
                                 params_name, B, k, accepted, t * 1e6,
                                 t_calls * 1e6, bytes, bytes / t / 1e9, bytes / t / 1e9 / copy_bw);
                        rows += b;
                        printf("V %6d %-4s %-6s B %2d k %d: accepted %4lld  graph %8.1f us  call %8.1f us  %7.1f GB/s\n", V,
                               dt ? "bf16" : "f32", params_label, B, k, accepted, t * 1e6,
                               t_calls * 1e6, bytes / t / 1e9);
                    }
            }
        }
    Json j;
    j.num("copy_GBps_read_plus_write", copy_bw);
    j.num("split_rows", split_rows);
    j.raw("runs", rows + "\n  ]");
    std::string out = j.done();
    if (json_path) { FILE *fp = fopen(json_path, "w"); if (fp) { fputs(out.c_str(), fp); fclose(fp); } }
    pyspec_cuda_verifier_free(gpu);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s check|bench [out.json]\n", argv[0]); return 2; }
    const char *out = argc > 2 ? argv[2] : NULL;
    if (!strcmp(argv[1], "check")) return check(out);
    if (!strcmp(argv[1], "bench")) return bench(out);
    return 2;
}
