/*
 * test_main.c - runs the C-level tests of pyspec's public API (csrc/pyspec.h), meant to run
 * under AddressSanitizer + UndefinedBehaviorSanitizer (cmake -DPYSPEC_SANITIZE=ON).
 *
 * No framework: every CHECK counts one pass or one failure, the last line printed is
 * "N passed, M failed", and the exit status is non-zero when anything failed.
 *
 * Every buffer handed to the library is malloc'ed at its exact size, and the last logits
 * row of a sequence ends exactly where its allocation ends, so ASan reports any read or
 * write past an end. Padding that the library must never read (between logits rows, after
 * n_vocab in dense draft rows, after n_per_row in sparse draft rows) holds NaN or invalid
 * token ids, so a stray read also shows up as a wrong status or a wrong result without ASan.
 *
 * The tests live in one file per subject (test_rng.c, test_errors.c, test_logits.c,
 * test_distribution.c, test_draft_probs.c, test_verify.c, test_exactness.c,
 * test_penalties.c, test_cuda_api.c, test_logprobs.c, test_suffix_index.c) and share test_util.h. They run as one executable, in
 * the order below: the groups draw from one PRNG stream, so the order fixes every random
 * case.
 */
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

typedef struct test_group {
    const char *name;
    void (*run)(void);
} test_group;

int main(void) {
    const test_group groups[] = {
        { "conversions (test helpers)", check_conversions },
        { "1. Philox known answers", test_philox_known_answers },
        { "1. pyspec_uniform", test_uniform },
        { "2. info functions", test_info_functions },
        { "2. pyspec_verifier_create errors", test_create_errors },
        { "2. pyspec_sample / pyspec_distribution errors", test_sample_and_distribution_errors },
        { "2. pyspec_verify_batch errors", test_verify_batch_errors },
        { "3. NaN / +inf logits", test_bad_logits },
        { "3. all -inf rows", test_all_neg_inf_rows },
        { "3. -inf never sampled", test_neg_inf_never_sampled },
        { "3. error names the sequence", test_error_names_sequence },
        { "5. distribution", test_distribution },
        { "6. draft probability errors", test_draft_probs_errors },
        { "first token distributed as p", test_first_token_distribution },
        { "4. randomised verify invariants", run_random_invariants },
        { "penalties, randomised", test_penalties_random },
        { "CUDA entry points", test_cuda_entry_points },
        { "row logprobs", test_row_logprobs },
        { "row logprobs errors", test_row_logprobs_errors },
        { "suffix index against brute force", test_suffix_index_random },
        { "suffix index errors", test_suffix_index_errors },
    };
    printf("pyspec %s, SIMD path %s\n", pyspec_version(), pyspec_simd_name());
    const double start = wall_seconds();
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; ++g) {
        const long long failed_before = g_failed;
        const double t0 = wall_seconds();
        groups[g].run();
        printf("%-50s %6.2f s  %s\n", groups[g].name, wall_seconds() - t0,
               g_failed == failed_before ? "ok" : "FAILED");
        fflush(stdout);
    }
    printf("total %.2f s\n", wall_seconds() - start);
    printf("%lld passed, %lld failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
