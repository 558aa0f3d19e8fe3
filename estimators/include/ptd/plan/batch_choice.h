// batch_choice.h — the micro-batch, and the interleaved schedule's depth, of a job that leaves
// them out (batchchoice; docs/job-spec.md "Unwritten micro-batch and interleaving depth").
// Megatron-LM has no default micro-batch (--micro-batch-size is required) and published runs
// seldom state theirs, yet the micro-batch decides how much of the data-parallel reduction
// hides behind the last backward. The benchmark tables a user writes a job from are tuned
// runs, so an unwritten micro-batch is taken as a tuned run of the framework has it: the
// fastest that fits the GPU with the framework's planning headroom (plan_headroom) — of the
// candidates within kBatchChoiceTolerance of the fastest, the one with the fewest chunks per
// stage, then the smallest micro-batch. Each choice is listed with the stack's defaults
// (job.origin.stack_defaults), so `ptd estimate`, its JSON and the studio show it; writing the
// key pins it.
#pragma once

#include "ptd/spec/job_spec.h"

namespace ptd {

struct ClusterProfile;

// Within this share of the fastest candidate's tokens/s, fewer chunks and a smaller
// micro-batch win. The time model's median error on published runs is about 5%
// (bench_accuracy's check set), so a candidate predicted faster by less than that is not known
// to be faster, while each extra chunk adds pipeline hops and a larger micro-batch holds more
// activations; picking the plain argmax also picks the candidates the model is most
// optimistic about. With every published run's micro-batch hidden, this choice reproduces the
// runs with a 5.8% median error against 6.4% for the argmax and 7.7% for micro-batch 1
// (docs/accuracy.md, "batchchoice").
inline constexpr double kBatchChoiceTolerance = 0.05;

// Picks training.micro_batch when the job leaves it out but writes its layout and global
// batch, and parallel.vpp when it names the interleaved schedule without one; the job must
// be valid (validate_job empty) with the loader's starting values (micro-batch 1, the fewest
// chunks). A performance recipe the job names (training.recipe) gives its own micro-batch
// instead. A job that writes both keys, or has no layout, is left unchanged. When no
// candidate fits, the starting values stay and the listed default says so.
void choose_unwritten_batching(JobSpec& job, const ClusterProfile* profile = nullptr);

}  // namespace ptd
