// host/checkpoint.h: checkpoint files, written atomically, read with every field checked.
//
// A checkpoint holds everything a run needs to continue bit-for-bit: the model config (family,
// shapes, value path and its settings), the fp32 master weights, the AdamW moments, the step,
// the sampling RNG, the data loaders' positions and the resolved command line. The GPU build
// writes the same file (fp32 master weights), so a checkpoint moves freely between builds.
//
// Layout (little-endian):
//   CheckpointHeader                    (fixed size, magic + version first)
//   run_text                            (header.run_text_bytes bytes: "flag=value\n" lines)
//   params  float32[num_params]
//   m       float32[num_params]         (only if has_optimizer)
//   v       float32[num_params]         (only if has_optimizer)
// Two CRC-32s (host/crc32.h, the same as Python's zlib.crc32) in the header, since version 2:
//   header_crc  over the header (with both CRC fields zero) and the run text: checked whenever a
//               checkpoint is opened, before any field is trusted (a flipped bit in a shape would
//               otherwise become a wrong model);
//   data_crc    over params, m, v in file order: checked when the tensors are read.
// So a file damaged on disk or in a copy, but still of the right length, is refused with a clear
// error instead of training on from wrong weights. Version 1 files (no CRCs) are still read.
// Written to DIR/.ckpt_SSSSSSSS.bin.tmp, flushed, fsync'ed, then renamed to DIR/ckpt_SSSSSSSS.bin
// and the directory fsync'ed: a kill at any moment leaves either the old set of checkpoints or
// the old set plus the complete new one, never a half-written file under a checkpoint name.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "host/config.h"
#include "host/crc32.h"
#include "host/dataloader.h"
#include "host/distributed.h"
#include "host/rng.h"
#include "host/update_guard.h"
#include "host/utils.h"

#define CHECKPOINT_MAGIC 20261101
#define CHECKPOINT_VERSION 2          // written; 2 adds the CRCs
#define CHECKPOINT_VERSION_NO_CRC 1   // still read, without the checks
#define CHECKPOINT_MAX_RUN_TEXT (1 << 20)  // bytes of run text a reader accepts; a run is refused at startup above it

static_assert(std::is_trivially_copyable<ModelConfig>::value, "ModelConfig is written raw into checkpoints");
static_assert(std::is_trivially_copyable<DataLoaderState>::value, "DataLoaderState is written raw into checkpoints");

struct CheckpointHeader {
    int32_t magic;            // CHECKPOINT_MAGIC
    int32_t version;          // CHECKPOINT_VERSION
    int32_t header_bytes;     // sizeof(CheckpointHeader), a guard against layout changes
    int32_t has_optimizer;    // 1 = m and v follow the parameters
    int64_t step;             // optimizer steps completed
    int64_t num_params;       // float32 count of params (and of m, v)
    int64_t run_text_bytes;   // length of the run_text block
    ModelConfig model;
    Rng sample_rng;
    DataLoaderState train_data;
    uint32_t header_crc;      // version 2: CRC-32 of this header (both CRCs zero) + run_text
    uint32_t data_crc;        // version 2: CRC-32 of params [, m, v]
    UpdateGuardState update_guard;  // the outlier statistics of --skip-loss-z/--skip-norm-z (host/update_guard.h);
                                    // zero where the run had them off, and in files from before 2026-11-29
    int32_t reserved[50];
};
static_assert(sizeof(CheckpointHeader) == 552, "the checkpoint header's layout is the file format (dev/reference/model.py reads it)");

// over the header's bytes as they are in the file (padding included), with both CRC fields zero
inline uint32_t checkpoint_header_crc(const CheckpointHeader& h, const std::string& run_text) {
    unsigned char bytes[sizeof(CheckpointHeader)];
    memcpy(bytes, &h, sizeof(h));
    memset(bytes + offsetof(CheckpointHeader, header_crc), 0, sizeof(h.header_crc));
    memset(bytes + offsetof(CheckpointHeader, data_crc), 0, sizeof(h.data_crc));
    return crc32_update(crc32_update(0, bytes, sizeof(bytes)), run_text.data(), run_text.size());
}

// What a checkpoint says about a run, apart from the big tensors.
struct CheckpointMeta {
    ModelConfig model;
    int64_t step = 0;
    int64_t num_params = 0;
    int has_optimizer = 0;
    Rng sample_rng{};
    DataLoaderState train_data{};
    UpdateGuardState update_guard{};
    std::string run_text;
    int version = 0;        // as read from a file (checkpoint_open); the writer always writes CHECKPOINT_VERSION
    uint32_t data_crc = 0;  // as read: the header's CRC of the tensors, checked by checkpoint_read
};

inline std::string checkpoint_path(const std::string& dir, int64_t step) {
    char name[64];
    snprintf(name, sizeof(name), "/ckpt_%08lld.bin", (long long)step);
    return dir + name;
}

// mkdir -p
inline void make_dirs(const std::string& dir) {
    std::string part;
    for (size_t i = 0; i <= dir.size(); i++) {
        if (i == dir.size() || dir[i] == '/') {
            if (!part.empty() && mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
                runtime_error("check the path and its permissions", "cannot create directory '%s': %s", part.c_str(), strerror(errno));
        }
        if (i < dir.size()) part += dir[i];
    }
    struct stat st;
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) runtime_error("choose another --out-dir", "'%s' is not a directory", dir.c_str());
}

// The pid of the process that holds an flock on the open file fd, from /proc/locks (Linux; the
// lines are "N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE 0 EOF"), or 0 where it is not found (a lock
// held on another machine that shares the directory, or no /proc).
inline long flock_holder_pid(int fd) {
    struct stat st;
    FILE* f = fopen("/proc/locks", "r");
    if (!f || fstat(fd, &st) != 0) {
        if (f) fclose(f);
        return 0;
    }
    char line[256], kind[16];
    long pid = 0, found = 0;
    unsigned maj = 0, min = 0;
    unsigned long inode = 0;
    while (!found && fgets(line, sizeof(line), f))
        if (sscanf(line, "%*d: %15s %*s %*s %ld %x:%x:%lu", kind, &pid, &maj, &min, &inode) == 5 && strcmp(kind, "FLOCK") == 0 &&
            inode == (unsigned long)st.st_ino && maj == major(st.st_dev) && min == minor(st.st_dev))
            found = pid;
    fclose(f);
    return found;
}

// Two runs in one --out-dir would write over each other's checkpoints and log (a job submitted
// twice, or submitted again while the first still runs: with --resume auto both would continue
// from the same checkpoint). Rank 0 holds an exclusive flock on DIR/.lock (an empty file) from
// before it reads the directory until the run ends: the OutDirLock's destructor releases it (for
// the tests and fuzzers that run train_main in-process again and again), and the kernel drops it
// when the process ends, however it ends, so a killed run leaves nothing to clean up (the file
// stays, unlocked). Does nothing while DIR does not exist yet (the trainer calls it again once it
// has made DIR). A file system that cannot lock (some network file systems) gets a note, not an
// error.
struct OutDirLock {
    int fd = -1;
    bool settled = false;  // locked, or the file system cannot lock: nothing more to try
    OutDirLock() = default;
    OutDirLock(const OutDirLock&) = delete;
    OutDirLock& operator=(const OutDirLock&) = delete;
    ~OutDirLock() {
        if (fd >= 0) close(fd);
    }
};

inline void lock_out_dir(OutDirLock* lock, const std::string& dir) {
    struct stat st;
    if (lock->settled || dir.empty() || stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;
    std::string path = dir + "/.lock";
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) runtime_error("check that --out-dir is writable", "cannot open '%s': %s", path.c_str(), strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        if (err == EWOULDBLOCK) {
            long holder = flock_holder_pid(fd);
            char who[64] = "on this machine or another that shares the directory";
            if (holder > 0) snprintf(who, sizeof(who), "pid %ld", holder);
            close(fd);
            runtime_error("wait for that run to end (or stop it), or choose another --out-dir",
                          "--out-dir '%s' is in use by another run (%s): two runs there would overwrite each other's checkpoints and log.jsonl", dir.c_str(), who);
        }
        close(fd);
        printf("note: cannot lock '%s' (%s): nothing stops a second run from using --out-dir '%s' at the same time\n", path.c_str(), strerror(err), dir.c_str());
        lock->settled = true;
        return;
    }
    lock->fd = fd;  // open, and locked, until the OutDirLock goes (or the process)
    lock->settled = true;
}

// Steps of every complete checkpoint (ckpt_<digits>.bin, 8 digits or more: checkpoint_path pads
// to 8 and writes more past step 99,999,999) in dir, ascending. Temporary files of an interrupted
// write (.ckpt_*.tmp) and anything that is not a regular file are ignored.
inline std::vector<int64_t> checkpoint_list_steps(const std::string& dir) {
    std::vector<int64_t> steps;
    DIR* d = opendir(dir.c_str());
    if (!d) return steps;
    while (struct dirent* e = readdir(d)) {
        const char* n = e->d_name;
        size_t len = strlen(n);
        if (len < 17 || len > 27 || strncmp(n, "ckpt_", 5) || strcmp(n + len - 4, ".bin")) continue;
        bool digits = true;
        for (size_t i = 5; i < len - 4; i++) digits &= (n[i] >= '0' && n[i] <= '9');
        struct stat st;
        if (digits && stat((dir + "/" + n).c_str(), &st) == 0 && S_ISREG(st.st_mode)) steps.push_back(atoll(n + 5));
    }
    closedir(d);
    std::sort(steps.begin(), steps.end());
    return steps;
}

inline void fsync_dir(const std::string& dir) {
    int fd = open(dir.c_str(), O_RDONLY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

// A checkpoint written in pieces, so that no process holds the whole state at once: the header
// and run text first (header_crc covers the header with both CRC fields zero, so it is known at
// once; data_crc is zero), then the tensors in file order through checkpoint_writer_append, then
// checkpoint_writer_finish puts data_crc into the header, fsyncs and renames. An error is
// recorded, not raised: under data parallelism the other ranks are inside the same collective
// gather, so rank 0 must finish it before it can tell them (checkpoint_save_streamed); appends after
// an error are skipped, and finish removes the temporary file and returns the message.
struct CheckpointWriter {
    std::string dir, tmp_path, final_path;
    FILE* f = nullptr;
    CheckpointHeader header;
    uint32_t data_crc = 0;
    int64_t floats_expected = 0, floats_written = 0;
    std::string error;  // empty while all is well
};

#define CHECKPOINT_WRITE_HINT "free disk space (or raise a file-size limit, ulimit -f; or choose another --out-dir) and resume; the earlier checkpoints are intact"

// Floats per piece that a streamed save moves through host memory: 64 MB by default;
// VP_CHECKPOINT_CHUNK (floats) overrides it, so tests can cut tiny models into many pieces.
inline size_t checkpoint_chunk_floats() {
    return (size_t)env_number("VP_CHECKPOINT_CHUNK", 16 << 20, 1, 1 << 30);  // a piece is one MPI message: < 2^31 floats
}

inline void checkpoint_writer_fail(CheckpointWriter* w, const char* what, int err) {
    if (!w->error.empty()) return;
    char msg[1024];
    snprintf(msg, sizeof(msg), "writing checkpoint '%s' failed: %s: %s", w->final_path.c_str(), what, strerror(err));
    w->error = msg;
}

inline void checkpoint_writer_begin(CheckpointWriter* w, const std::string& dir, const CheckpointMeta& meta) {
    make_dirs(dir);
    w->dir = dir;
    w->final_path = checkpoint_path(dir, meta.step);
    char tmp_name[96];
    snprintf(tmp_name, sizeof(tmp_name), "/.ckpt_%08lld.bin.tmp", (long long)meta.step);
    w->tmp_path = dir + tmp_name;

    CheckpointHeader& h = w->header;
    memset(&h, 0, sizeof(h));
    h.magic = CHECKPOINT_MAGIC;
    h.version = CHECKPOINT_VERSION;
    h.header_bytes = (int32_t)sizeof(CheckpointHeader);
    h.has_optimizer = meta.has_optimizer;
    h.step = meta.step;
    h.num_params = meta.num_params;
    h.run_text_bytes = (int64_t)meta.run_text.size();
    h.model = meta.model;
    h.sample_rng = meta.sample_rng;
    h.train_data = meta.train_data;
    h.update_guard = meta.update_guard;
    h.header_crc = checkpoint_header_crc(h, meta.run_text);
    w->floats_expected = meta.num_params * (meta.has_optimizer ? 3 : 1);

    w->f = fopen(w->tmp_path.c_str(), "wb");
    if (!w->f) {
        checkpoint_writer_fail(w, "cannot create the temporary file", errno);
        return;
    }
    if (fwrite(&h, sizeof(h), 1, w->f) != 1 || fwrite(meta.run_text.data(), 1, meta.run_text.size(), w->f) != meta.run_text.size())
        checkpoint_writer_fail(w, "header", errno);
}

// The next `count` floats of params [, m, v], in file order.
inline void checkpoint_writer_append(CheckpointWriter* w, const float* x, size_t count) {
    if (!w->error.empty() || count == 0) return;
    w->data_crc = crc32_update(w->data_crc, x, count * sizeof(float));
    w->floats_written += (int64_t)count;
    if (fwrite(x, sizeof(float), count, w->f) != count) checkpoint_writer_fail(w, "tensors", errno);
}

// "" when the complete checkpoint is in place under its final name; otherwise why not (and the
// temporary file is gone, the earlier checkpoints untouched).
inline std::string checkpoint_writer_finish(CheckpointWriter* w) {
    if (w->error.empty() && w->floats_written != w->floats_expected) {
        char msg[256];
        snprintf(msg, sizeof(msg), "internal: %lld of %lld floats were written", (long long)w->floats_written, (long long)w->floats_expected);
        w->error = msg;
    }
    if (w->f) {
        if (w->error.empty()) {
            // data_crc into its place in the header; header_crc does not cover it
            w->header.data_crc = w->data_crc;
            if (fseek(w->f, (long)offsetof(CheckpointHeader, data_crc), SEEK_SET) != 0 ||
                fwrite(&w->header.data_crc, sizeof(uint32_t), 1, w->f) != 1 || fflush(w->f) != 0 || fsync(fileno(w->f)) != 0)
                checkpoint_writer_fail(w, "flush", errno);
        }
        if (fclose(w->f) != 0) checkpoint_writer_fail(w, "close", errno);
        w->f = nullptr;
    }
    if (w->error.empty() && rename(w->tmp_path.c_str(), w->final_path.c_str()) != 0) checkpoint_writer_fail(w, "rename of the temporary file", errno);
    if (!w->error.empty()) {
        unlink(w->tmp_path.c_str());
        return w->error;
    }
    fsync_dir(w->dir);
    return "";
}

// A whole checkpoint from arrays in memory (m, v NULL without optimizer state).
inline void checkpoint_write(const std::string& dir, const CheckpointMeta& meta, const float* params, const float* m, const float* v) {
    CheckpointWriter w;
    checkpoint_writer_begin(&w, dir, meta);
    size_t n = (size_t)meta.num_params;
    checkpoint_writer_append(&w, params, n);
    if (meta.has_optimizer) {
        checkpoint_writer_append(&w, m, n);
        checkpoint_writer_append(&w, v, n);
    }
    std::string err = checkpoint_writer_finish(&w);
    if (!err.empty()) runtime_error(CHECKPOINT_WRITE_HINT, "%s", err.c_str());
}

// The trainers' save (model_save of both builds). Every rank calls it; rank 0 writes. Tensor t
// (0 params, 1 m, 2 v; m and v only with meta.has_optimizer) streams to rank 0 in pieces of
// checkpoint_chunk_floats() (host/distributed.h dist_stream_to_root): fill(t, off, count, dst)
// writes elements [off, off + count) of tensor t, which this rank holds (its dist_shard if
// sharded[t], all of them if not). So no process holds a second copy of the state. At the end
// every rank learns whether rank 0's write worked, so that a full disk stops the whole job with
// the reason instead of leaving the other ranks waiting in the next collective.
template <class Fill>
void checkpoint_save_streamed(const std::string& dir, const CheckpointMeta& meta, const bool sharded[3], Fill fill) {
    CheckpointWriter w;
    bool root = dist_rank() == 0;
    if (root) checkpoint_writer_begin(&w, dir, meta);
    size_t chunk = checkpoint_chunk_floats();
    for (int t = 0; t < (meta.has_optimizer ? 3 : 1); t++)
        dist_stream_to_root(
            (size_t)meta.num_params, sharded[t], chunk, [&](size_t off, size_t count, float* dst) { fill(t, off, count, dst); },
            [&](const float* piece, size_t count) { checkpoint_writer_append(&w, piece, count); });
    std::string err = root ? checkpoint_writer_finish(&w) : "";
    double failed = err.empty() ? 0.0 : 1.0;
    dist_allreduce_sum(&failed, 1);
    if (!err.empty()) runtime_error(CHECKPOINT_WRITE_HINT, "%s", err.c_str());
    if (failed != 0.0) runtime_error(CHECKPOINT_WRITE_HINT, "rank %d: rank 0 could not write the checkpoint (its message says why)", dist_rank());
}

// Removes all but the newest `keep` checkpoints (keep = 0: keep all) and, with keep_every > 0, the
// checkpoints whose step is a multiple of keep_every (kept for good: a long run's snapshots for
// later evaluation, llm.c's "major" checkpoints).
inline void checkpoint_prune(const std::string& dir, int keep, int keep_every = 0) {
    if (keep <= 0) return;
    std::vector<int64_t> steps = checkpoint_list_steps(dir);
    for (size_t i = 0; i + keep < steps.size(); i++)
        if (keep_every <= 0 || steps[i] % keep_every != 0) unlink(checkpoint_path(dir, steps[i]).c_str());
}

// Reads and checks the header and run text; leaves the file positioned at the parameters.
inline FILE* checkpoint_open(const std::string& path, CheckpointMeta* meta) {
    const char* hint = "pass a checkpoint written by valuepath (DIR/ckpt_*.bin); if it was cut short, use an earlier one";
    require_regular_file(path.c_str(), "checkpoint", "check the path; checkpoints are DIR/ckpt_SSSSSSSS.bin");
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) runtime_error("check the path; checkpoints are DIR/ckpt_SSSSSSSS.bin", "cannot open checkpoint '%s': %s", path.c_str(), strerror(errno));
    CheckpointHeader h;
    memset(&h, 0, sizeof(h));
    size_t got = fread(&h, 1, sizeof(h), f);
    if (got < 8 || h.magic != CHECKPOINT_MAGIC) {
        fclose(f);
        runtime_error(hint, "'%s' is not a valuepath checkpoint (bad magic %d, expected %d)", path.c_str(), got >= 4 ? h.magic : 0, CHECKPOINT_MAGIC);
    }
    // the version is known from 8 bytes, the header size from 12; shorter than that, a file is only
    // cut short (the unread fields are zero, which would read as a version mismatch)
    if (got < 12) {
        fclose(f);
        runtime_error(hint, "checkpoint '%s' is cut short inside its header (%zu of %zu bytes)", path.c_str(), got, sizeof(h));
    }
    if ((h.version != CHECKPOINT_VERSION && h.version != CHECKPOINT_VERSION_NO_CRC) || h.header_bytes != (int32_t)sizeof(CheckpointHeader)) {
        fclose(f);
        runtime_error("use the valuepath version that wrote it", "checkpoint '%s' has version %d (header %d bytes); this build reads versions %d and %d (%d bytes)",
                      path.c_str(), h.version, h.header_bytes, CHECKPOINT_VERSION_NO_CRC, CHECKPOINT_VERSION, (int)sizeof(CheckpointHeader));
    }
    if (got != sizeof(h)) {
        fclose(f);
        runtime_error(hint, "checkpoint '%s' is cut short inside its header (%zu of %zu bytes)", path.c_str(), got, sizeof(h));
    }
    if (h.run_text_bytes < 0 || h.run_text_bytes > CHECKPOINT_MAX_RUN_TEXT) {
        fclose(f);
        runtime_error(hint, "checkpoint '%s' has a corrupt header", path.c_str());
    }
    meta->run_text.assign((size_t)h.run_text_bytes, '\0');
    if (h.run_text_bytes && fread(&meta->run_text[0], 1, (size_t)h.run_text_bytes, f) != (size_t)h.run_text_bytes) {
        fclose(f);
        runtime_error(hint, "checkpoint '%s' is cut short inside its header", path.c_str());
    }
    if (h.version == CHECKPOINT_VERSION && checkpoint_header_crc(h, meta->run_text) != h.header_crc) {
        fclose(f);
        runtime_error("the file was damaged after it was written (disk, copy): restore it from a copy, or move it out of the directory so that --resume takes the one before it",
                      "checkpoint '%s' is corrupt: the CRC-32 of its header does not match", path.c_str());
    }
    const UpdateGuardState& ug = h.update_guard;
    bool guard_ok = ug.seen >= 0 && ug.skipped >= 0 && ug.skipped <= ug.seen && std::isfinite(ug.loss_mean) && std::isfinite(ug.norm_mean) &&
                    ug.loss_var >= 0 && ug.norm_var >= 0 && std::isfinite(ug.loss_var) && std::isfinite(ug.norm_var);
    if (h.num_params <= 0 || (h.has_optimizer != 0 && h.has_optimizer != 1) || !guard_ok) {
        fclose(f);
        runtime_error(hint, "checkpoint '%s' has a corrupt header", path.c_str());
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        int err = errno;
        fclose(f);
        runtime_error("check the file and the disk it is on", "cannot read the size of checkpoint '%s': %s", path.c_str(), strerror(err));
    }
    // the parameter count is bounded by the file's size first, so that the product cannot overflow
    int64_t tensor_bytes = 4 * (1 + 2 * (int64_t)h.has_optimizer), head_bytes = (int64_t)sizeof(h) + h.run_text_bytes;
    if (h.num_params > ((int64_t)st.st_size - head_bytes) / tensor_bytes) {
        fclose(f);
        runtime_error(hint, "checkpoint '%s' is %lld bytes, too small for the %lld parameters its header gives (truncated or corrupt)", path.c_str(),
                      (long long)st.st_size, (long long)h.num_params);
    }
    int64_t expect = head_bytes + h.num_params * tensor_bytes;
    if ((int64_t)st.st_size != expect) {
        fclose(f);
        runtime_error(hint, "checkpoint '%s' is %lld bytes but its header says %lld (truncated or corrupt)", path.c_str(), (long long)st.st_size, (long long)expect);
    }
    meta->model = h.model;
    meta->step = h.step;
    meta->num_params = h.num_params;
    meta->has_optimizer = h.has_optimizer;
    meta->sample_rng = h.sample_rng;
    meta->train_data = h.train_data;
    meta->update_guard = h.update_guard;
    meta->version = h.version;
    meta->data_crc = h.data_crc;
    return f;
}

inline void checkpoint_read_meta(const std::string& path, CheckpointMeta* meta) { fclose(checkpoint_open(path, meta)); }

// Reads the tensors in file order, in pieces of checkpoint_chunk_floats(), so that a process never
// holds more than one piece of the file: consume(tensor, offset, piece, count) gets elements
// [offset, offset + count) of params (tensor 0), m (1) and v (2). with_optimizer false
// (--init-from): m and v are not handed over, but their bytes still go through the CRC (version 2).
// The CRC is known only at the end, so a damaged file is refused after consume has seen its
// pieces: the caller must not have written anything lasting by then (the trainers load before
// anything is written).
// model_params: the parameter count of the model it is read into (0: any).
template <class Consume>
void checkpoint_read_stream(const std::string& path, CheckpointMeta* meta, bool with_optimizer, Consume consume, size_t model_params = 0) {
    FILE* f = checkpoint_open(path, meta);
    if (model_params && (size_t)meta->num_params != model_params) {
        fclose(f);
        runtime_error("the checkpoint does not belong to this model shape", "checkpoint '%s' holds %lld parameters, the model has %zu", path.c_str(),
                      (long long)meta->num_params, model_params);
    }
    // at step 0 the AdamW moments are zero by definition: a checkpoint of the initial weights
    // (--max-steps 0 --out-dir D writes one, without them) resumes like any other, its moments
    // left at zero by the caller; only a later step's checkpoint without them cannot be resumed
    if (with_optimizer && !meta->has_optimizer && meta->step != 0) {
        fclose(f);
        runtime_error("resume from a training checkpoint, or use --init-from", "checkpoint '%s' has no optimizer state", path.c_str());
    }
    size_t n = (size_t)meta->num_params, chunk = checkpoint_chunk_floats();
    int tensors = meta->has_optimizer && (with_optimizer || meta->version == CHECKPOINT_VERSION) ? 3 : 1;
    std::vector<float> piece(std::min(n, chunk));
    uint32_t crc = 0;
    // AdamW's moments as resumed: m finite, v finite and >= 0 (a mean of squares). A file with
    // valid CRCs can still hold others (written by other software, or by a run whose moments
    // overflowed without its weights doing so); resumed, they would turn every weight they touch
    // into NaN at the first update, and the run would stop one step later as "diverged", blaming
    // the learning rate. Counted here, refused after the CRC check (damage is named first).
    size_t bad[3] = {0, 0, 0}, first_bad[3] = {0, 0, 0};
    for (int t = 0; t < tensors; t++) {
        for (size_t off = 0; off < n; off += chunk) {
            size_t count = std::min(chunk, n - off);
            fread_check(piece.data(), sizeof(float), count, f, path.c_str());
            crc = crc32_update(crc, piece.data(), count * sizeof(float));
            if (t == 0 || with_optimizer) consume(t, off, (const float*)piece.data(), count);
            if (t > 0 && with_optimizer) {
                for (size_t i = 0; i < count; i++) {
                    float x = piece[i];
                    if (std::isfinite(x) && (t == 1 || x >= 0)) continue;
                    if (!bad[t]++) first_bad[t] = off + i;
                }
            }
        }
    }
    fclose(f);
    if (meta->version == CHECKPOINT_VERSION && crc != meta->data_crc)
        runtime_error("the file was damaged after it was written (disk, copy): restore it from a copy, or move it out of the directory so that --resume takes the one before it",
                      "checkpoint '%s' is corrupt: the CRC-32 of its weights%s does not match", path.c_str(), meta->has_optimizer ? " and optimizer state" : "");
    if (bad[1] || bad[2]) {
        char what[2][160] = {"", ""};
        if (bad[1]) snprintf(what[0], sizeof(what[0]), "%zu value%s of m (AdamW's first moment) NaN or inf, the first at element %zu", bad[1], bad[1] == 1 ? "" : "s", first_bad[1]);
        if (bad[2]) snprintf(what[1], sizeof(what[1]), "%zu value%s of v (AdamW's second moment) NaN, inf or negative, the first at element %zu", bad[2], bad[2] == 1 ? "" : "s", first_bad[2]);
        runtime_error("its weights can still start a new run: --init-from it (the optimizer starts afresh); or move it out of the directory so that --resume takes the one before it",
                      "checkpoint '%s' cannot be resumed: its optimizer state is not valid: %s%s%s", path.c_str(), what[0], bad[1] && bad[2] ? "; " : "", what[1]);
    }
}

// The trainers' load (model_load of both builds) into a model of model_params parameters: all
// the weights, and of m and v only the elements in `moments` (a rank's dist_shard under ZeRO-1).
// put(t, index, values, count) stores elements [index, index + count) of tensor t (0 params,
// 1 m, 2 v), indexed from moments.offset for m and v. with_optimizer false: the weights only.
template <class Put>
void checkpoint_read_shard(const std::string& path, CheckpointMeta* meta, size_t model_params, bool with_optimizer, DistShard moments, Put put) {
    checkpoint_read_stream(
        path, meta, with_optimizer,
        [&](int t, size_t off, const float* piece, size_t count) {
            DistShard keep = t == 0 ? DistShard{0, model_params} : moments;
            size_t lo = std::max(off, keep.offset), hi = std::min(off + count, keep.offset + keep.count);
            if (lo < hi) put(t, lo - keep.offset, piece + (lo - off), hi - lo);
        },
        model_params);
}

// The whole tensors into memory (m and v may be NULL to skip the optimizer state: --init-from).
inline void checkpoint_read(const std::string& path, CheckpointMeta* meta, float* params, float* m, float* v) {
    float* dst[3] = {params, m, v};
    checkpoint_read_stream(path, meta, m && v, [&](int t, size_t off, const float* piece, size_t count) {
        memcpy(dst[t] + off, piece, count * sizeof(float));
    });
}
