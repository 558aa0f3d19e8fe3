// checkpoint.h — ptd-engine's checkpoint files and the checks before a resume.
//
// A checkpoint of step k is the folder <run_dir>/checkpoints/step-<k, 8 digits>/ with one
// shard file per rank, rank-<r, 5 digits>.bin, and manifest.json, which rank 0 writes
// after every shard is on disk. A folder without manifest.json is an incomplete
// checkpoint and is never resumed from.
//
// Shard file (all integers little-endian):
//   "PTDCKPT1"                     8 bytes, magic
//   u32 format version (= 1), u32 rank, u64 blob count, u64 blob bytes (B)   header
//   B bytes of blobs, each: u32 name length, name, u64 byte length, bytes
//   32 bytes: SHA-256 of everything before it
// Manifest (JSON, schema "ptd.checkpoint/1"): run_id, step, spec_hash, math_hash, spec,
// layout, data_position, rng_state, created, files [{rank, file, bytes, sha256,
// optimizer_range (optional: [offset, count] of the flat buffer)}].
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ptd/common/diagnostic.h"
#include "ptd/spec/job_spec.h"

namespace ptd::engine {

constexpr char shard_magic[] = "PTDCKPT1";   // 8 bytes, no terminator in the file
constexpr uint32_t shard_format_version = 1;
constexpr char manifest_schema[] = "ptd.checkpoint/1";

// ---- paths -----------------------------------------------------------------------------

// "<run_dir>/checkpoints/step-00000042" for step 42.
std::string checkpoint_dir(const std::string& run_dir, int64_t step);
// "rank-00003.bin" for rank 3.
std::string shard_file_name(int rank);

// ---- shard files -----------------------------------------------------------------------

// A named byte range to write; `data` must stay valid during write_shard.
struct BlobView {
    std::string name;
    const void* data = nullptr;
    size_t bytes = 0;
};

// A blob read back.
struct Blob {
    std::string name;
    std::vector<uint8_t> bytes;
};

struct Shard {
    uint32_t format_version = 0;
    int rank = 0;
    std::vector<Blob> blobs;  // in the order they were written
    std::string sha256;       // SHA-256 of the whole file (as `sha256sum` prints it)

    // The blob called `name`, or nullptr.
    const Blob* find(std::string_view name) const;
};

// Asked right before a checkpoint file is renamed into place: "" allows it, a text refuses
// it (the temporary is removed and the write fails with "did not write …: <text>"). The
// trainer passes its store lease (KvClient::lease_lost), so a rank cut off from its run never
// puts a file where the restarted run reads and writes.
using CommitGuard = std::function<std::string()>;

// Writes a shard file for `rank` (≥ 0) with `blobs` (names non-empty, unique, < 64 KiB), creating
// the parent folder if needed. Writes `path + ".tmp"`, fsyncs it, renames it to `path`
// and fsyncs the folder, so a crash never leaves a half-written file under the final
// name; on failure the .tmp file is removed. Returns the SHA-256 hex of the whole file
// (what `sha256sum path` prints; the manifest records it). Errors name the path and the
// system's reason (disk full, permission denied, ...).
Result<std::string> write_shard(const std::string& path, int rank,
                                const std::vector<BlobView>& blobs, const CommitGuard& may_commit = {});

// Reads and verifies a shard file. Errors (each names the path):
//   missing or unreadable file; bad magic ("not a ptd-engine checkpoint shard");
//   unknown format version; truncated file ("is truncated: header says N bytes of blobs
//   plus a 32-byte checksum, file has M bytes after the header"); trailing bytes;
//   checksum mismatch (stored vs computed digest); with `expected_sha256` non-empty, a
//   whole-file digest that differs from it (expected vs actual); malformed blob records.
// Never throws and never allocates more than the file's size for blobs.
Result<Shard> read_shard(const std::string& path, const std::string& expected_sha256 = "");

// ---- job hashes ------------------------------------------------------------------------

// The canonical (key, value) list of everything that changes the math of a run, in a fixed
// order: every ModelSpec field except the cosmetic `name`; the training fields except
// `steps` and `flash_attention` (micro_batch, global_batch, precision, optimizer, lr,
// min_lr, warmup, weight_decay, grad_clip, seed, data); and, when `with_layout`, the
// parallel layout (tp, pp, dp, cp, ep, vpp, zero, distributed_optimizer,
// sequence_parallel, recompute, order, layers_per_stage). Keys are dotted
// ("training.lr"); doubles are printed in their shortest exact form ("0.0003"); a dp or
// global_batch left at 0 (to be derived) is replaced by its derived value.
std::vector<std::pair<std::string, std::string>> job_spec_fields(const JobSpec& job,
                                                                 bool with_layout = true);

// SHA-256 hex of the canonical text ("ptd.spec/1\n" then "key=value\n" per field) of
// job_spec_fields(job, true): equal hashes = same model, training and layout.
std::string job_spec_hash(const JobSpec& job);
// The same without the parallel layout: equal = same model and training math.
std::string job_math_hash(const JobSpec& job);

// ---- manifest --------------------------------------------------------------------------

// The parallel layout a checkpoint was written with.
struct CheckpointLayout {
    int world = 0;
    int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, vpp = 1;
    int zero = 0;
    bool distributed_optimizer = false;
    bool sequence_parallel = false;
    std::string recompute = "none";
    std::string order = "tp-cp-ep-dp-pp";
    std::vector<int> layers_per_stage;  // empty = even split

    bool operator==(const CheckpointLayout&) const = default;
};

// The layout of `job` on `world` ranks.
CheckpointLayout layout_of(const JobSpec& job, int world);

// "tp=2 pp=2 dp=1 zero=0 sp=off", then the other fields only where they are not the
// default (e.g. " vpp=2 recompute=full"), and world when it is not tp·pp·dp·cp.
std::string describe_layout(const CheckpointLayout& l);

struct ManifestFile {
    int rank = 0;
    std::string file;      // shard file name inside the checkpoint folder (no '/')
    int64_t bytes = 0;     // file size
    std::string sha256;    // whole-file SHA-256 hex (64 lower-case digits)
    // The elements [offset, offset + count) of the rank's flat parameter buffer whose
    // optimizer state the shard holds ("optimizer_range": [offset, count]; -1 = not
    // recorded, as in checkpoints written before it). A resume at another dp checks the
    // shards against it.
    int64_t optimizer_offset = -1, optimizer_count = -1;
};

struct Manifest {
    std::string run_id;
    int64_t step = 0;                 // optimizer steps completed
    std::string spec_hash;            // job_spec_hash of the job that wrote it
    std::string math_hash;            // job_math_hash of that job
    std::vector<std::pair<std::string, std::string>> spec;  // job_spec_fields (for messages)
    CheckpointLayout layout;
    int64_t data_position = 0;        // global sequences consumed
    std::string rng_state;            // opaque to this layer
    std::string created;              // ISO-8601 UTC, e.g. "2025-01-02T03:04:05Z"
    std::vector<ManifestFile> files;  // one per rank, in rank order

    std::string dir;                  // where read_manifest found it (not stored)
};

// A manifest for `job` at `step`: hashes, spec fields and layout filled from the job,
// created = now; files left empty for the caller.
Manifest make_manifest(const JobSpec& job, int world, const std::string& run_id, int64_t step,
                       int64_t data_position, const std::string& rng_state);

// The current UTC time as "YYYY-MM-DDTHH:MM:SSZ".
std::string iso8601_now();

// Writes <dir>/manifest.json (creating `dir` if needed) through a .tmp file, fsync and
// rename, so the manifest appears complete or not at all. Errors name the path.
Result<void> write_manifest(const std::string& dir, const Manifest& m, const CommitGuard& may_commit = {});

// Reads <dir>/manifest.json. Every field is required and type-checked (spec is optional);
// errors name the file and the field ("files[1].sha256: expected 64 hex digits, got
// \"xyz\""). Also checked: schema = "ptd.checkpoint/1", step ≥ 0, data_position ≥ 0,
// one file per rank 0..world−1, file names without '/'. Sets m.dir = dir.
Result<Manifest> read_manifest(const std::string& dir);
// The same checks on a manifest's text; `path` names it in errors (the fuzz target's entry).
Result<Manifest> parse_manifest(std::string_view text, const std::string& path, const std::string& dir);

// The folder of the highest-step checkpoint under <run_dir>/checkpoints/ that has a
// manifest.json; folders without one (incomplete) and names not of the form step-<digits>
// are skipped. nullopt when there is none (or run_dir does not exist).
std::optional<std::string> find_latest_checkpoint(const std::string& run_dir);

// How many restarts the launcher has recorded for the run in `run_dir`: the `restarts` of
// `ptd launch`'s run manifest (run_dir/manifest.json, saved before each new attempt starts)
// or, under Slurm, the lines of run_dir/restarts.jsonl; the larger. 0 when neither is there
// (a rank started by hand, or a host without the shared run directory); nullopt when one is
// there but cannot be read (being replaced at that instant). A rank remembers the count it
// started with: a larger one later means a newer attempt owns the run directory.
std::optional<int> restarts_recorded(const std::string& run_dir);

// Whether a run of `job` on `world` ranks may resume from `m`. Refuses (errors located at
// the manifest file):
//   - different model/training: "checkpoint <dir> was written for a different job: spec
//     hash <12 hex> vs <12 hex>; the model or training settings changed: training.lr
//     0.0003 → 0.001, ..." (the changed keys when the manifest has `spec`);
//   - different layout: "checkpoint <dir> was written with tp=2 pp=2 dp=1 zero=0 sp=off;
//     this run has tp=1 pp=2 dp=2 zero=0 sp=off; resuming on a different layout is not
//     supported" — except where only dp (and so world) differs, the one change a resume can
//     make by re-splitting the optimizer shards (reshard_over_dp: true; see below).
// `reshard_over_dp`, when given, is set to whether the resume re-splits the shards.
Result<void> check_resume_compatible(const Manifest& m, const JobSpec& job, int world,
                                     bool* reshard_over_dp = nullptr);

// ---- resuming at another data-parallel size ----------------------------------------------
//
// Model weights are whole on every dp replica; what dp splits is the optimizer state under
// ZeRO-1 (Adam's m and v and, in bf16/fp16, the f32 master weights): rank d of dp N holds
// the elements [d·S, (d+1)·S) of its (tp, cp, pp) position's flat parameter buffer, S =
// flat_numel / N, the buffer padded with zeros to a multiple of 128·N. A resume at dp M
// reads the N shard files of its position, joins their slices into [0, numel) and cuts its
// own [d'·S', (d'+1)·S') out of it; the padding elements are zero, as a fresh optimizer has
// them. Every element keeps its bits.

// Whether a checkpoint written with `from` can be resumed on `to` by re-splitting its
// optimizer shards: the layouts differ in dp (and world) and in nothing else.
bool only_dp_differs(const CheckpointLayout& from, const CheckpointLayout& to);

// One shard's optimizer state: the elements [offset, offset + m.size()) of a position's flat
// parameter buffer. `master` is empty in fp32 (the parameters are their own master copy).
struct OptimizerSlice {
    int64_t offset = 0;
    std::vector<float> m, v, master;
    std::string source;  // the shard file it came from (for messages)
};

// The checkpoint ranks (written with `from`) that hold the optimizer state of the position
// (tp, cp, pp): one per dp rank, in dp order — just dp rank 0 when `from` is not sharded
// (zero 0 or dp 1: every replica holds the whole state). Errors: an order or degrees
// make_layout refuses, coordinates outside `from`.
Result<std::vector<int>> reshard_source_ranks(const CheckpointLayout& from, int tp, int cp, int pp);

// The slice [offset, offset + count) rebuilt from `parts` (the slices reshard_source_ranks
// names) of a position with `numel` parameters. The parts must cover [0, numel) with no gap
// and agree on having master weights (`with_master`: this run needs them); elements at or
// past numel are the padding: zero. Errors name the shard files and the range no shard
// holds, so a partial checkpoint is never loaded.
Result<OptimizerSlice> reslice_optimizer(const std::vector<OptimizerSlice>& parts, int64_t numel, int64_t offset,
                                         int64_t count, bool with_master);

}  // namespace ptd::engine
