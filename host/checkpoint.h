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
// Written to DIR/.ckpt_SSSSSSSS.bin.tmp, flushed, fsync'ed, then renamed to DIR/ckpt_SSSSSSSS.bin
// and the directory fsync'ed: a kill at any moment leaves either the old set of checkpoints or
// the old set plus the complete new one, never a half-written file under a checkpoint name.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "host/config.h"
#include "host/dataloader.h"
#include "host/rng.h"
#include "host/utils.h"

#define CHECKPOINT_MAGIC 20261101
#define CHECKPOINT_VERSION 1

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
    int32_t reserved[64];
};

// What a checkpoint says about a run, apart from the big tensors.
struct CheckpointMeta {
    ModelConfig model;
    int64_t step = 0;
    int64_t num_params = 0;
    int has_optimizer = 0;
    Rng sample_rng{};
    DataLoaderState train_data{};
    std::string run_text;
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

// Steps of every complete checkpoint (ckpt_<digits>.bin) in dir, ascending. Temporary files of an
// interrupted write (.ckpt_*.tmp) are ignored.
inline std::vector<int64_t> checkpoint_list_steps(const std::string& dir) {
    std::vector<int64_t> steps;
    DIR* d = opendir(dir.c_str());
    if (!d) return steps;
    while (struct dirent* e = readdir(d)) {
        const char* n = e->d_name;
        size_t len = strlen(n);
        if (len != 17 || strncmp(n, "ckpt_", 5) || strcmp(n + 13, ".bin")) continue;
        bool digits = true;
        for (int i = 5; i < 13; i++) digits &= (n[i] >= '0' && n[i] <= '9');
        if (digits) steps.push_back(atoll(n + 5));
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

inline void checkpoint_write(const std::string& dir, const CheckpointMeta& meta, const float* params, const float* m, const float* v) {
    make_dirs(dir);
    std::string final_path = checkpoint_path(dir, meta.step);
    char tmp_name[96];
    snprintf(tmp_name, sizeof(tmp_name), "/.ckpt_%08lld.bin.tmp", (long long)meta.step);
    std::string tmp_path = dir + tmp_name;

    CheckpointHeader h;
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

    FILE* f = fopen(tmp_path.c_str(), "wb");
    if (!f) runtime_error("check that --out-dir is writable", "cannot create '%s': %s", tmp_path.c_str(), strerror(errno));
    size_t n = (size_t)meta.num_params;
    bool ok = fwrite(&h, sizeof(h), 1, f) == 1 && fwrite(meta.run_text.data(), 1, meta.run_text.size(), f) == meta.run_text.size() &&
              fwrite(params, sizeof(float), n, f) == n;
    if (ok && meta.has_optimizer) ok = fwrite(m, sizeof(float), n, f) == n && fwrite(v, sizeof(float), n, f) == n;
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved_errno = errno;
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        unlink(tmp_path.c_str());
        runtime_error("free disk space (or choose another --out-dir) and resume; the earlier checkpoints are intact",
                      "writing checkpoint '%s' failed: %s", final_path.c_str(), strerror(saved_errno ? saved_errno : errno));
    }
    if (rename(tmp_path.c_str(), final_path.c_str()) != 0) {
        int e = errno;
        unlink(tmp_path.c_str());
        runtime_error("check --out-dir; the earlier checkpoints are intact", "cannot rename '%s' to '%s': %s", tmp_path.c_str(), final_path.c_str(), strerror(e));
    }
    fsync_dir(dir);
}

// Removes all but the newest `keep` checkpoints (keep = 0: keep all).
inline void checkpoint_prune(const std::string& dir, int keep) {
    if (keep <= 0) return;
    std::vector<int64_t> steps = checkpoint_list_steps(dir);
    for (size_t i = 0; i + keep < steps.size(); i++) unlink(checkpoint_path(dir, steps[i]).c_str());
}

// Reads and checks the header and run text; leaves the file positioned at the parameters.
inline FILE* checkpoint_open(const std::string& path, CheckpointMeta* meta) {
    const char* hint = "pass a checkpoint written by valuepath (DIR/ckpt_*.bin); if it was cut short, use an earlier one";
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) runtime_error("check the path; checkpoints are DIR/ckpt_SSSSSSSS.bin", "cannot open checkpoint '%s': %s", path.c_str(), strerror(errno));
    CheckpointHeader h;
    memset(&h, 0, sizeof(h));
    size_t got = fread(&h, 1, sizeof(h), f);
    if (got < 8 || h.magic != CHECKPOINT_MAGIC) {
        fclose(f);
        runtime_error(hint, "'%s' is not a valuepath checkpoint (bad magic %d, expected %d)", path.c_str(), got >= 4 ? h.magic : 0, CHECKPOINT_MAGIC);
    }
    if (h.version != CHECKPOINT_VERSION || h.header_bytes != (int32_t)sizeof(CheckpointHeader)) {
        fclose(f);
        runtime_error("use the valuepath version that wrote it", "checkpoint '%s' has version %d (header %d bytes); this build reads version %d (%d bytes)",
                      path.c_str(), h.version, h.header_bytes, CHECKPOINT_VERSION, (int)sizeof(CheckpointHeader));
    }
    if (got != sizeof(h) || h.num_params <= 0 || h.run_text_bytes < 0 || h.run_text_bytes > (1 << 20) || (h.has_optimizer != 0 && h.has_optimizer != 1)) {
        fclose(f);
        runtime_error(hint, "checkpoint '%s' has a corrupt header", path.c_str());
    }
    struct stat st;
    fstat(fileno(f), &st);
    int64_t expect = (int64_t)sizeof(h) + h.run_text_bytes + h.num_params * 4 * (1 + 2 * (int64_t)h.has_optimizer);
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
    meta->run_text.assign((size_t)h.run_text_bytes, '\0');
    if (h.run_text_bytes) fread_check(&meta->run_text[0], 1, (size_t)h.run_text_bytes, f, path.c_str());
    return f;
}

inline void checkpoint_read_meta(const std::string& path, CheckpointMeta* meta) { fclose(checkpoint_open(path, meta)); }

// Reads the tensors. m and v may be NULL to skip the optimizer state (--init-from).
inline void checkpoint_read(const std::string& path, CheckpointMeta* meta, float* params, float* m, float* v) {
    FILE* f = checkpoint_open(path, meta);
    size_t n = (size_t)meta->num_params;
    fread_check(params, sizeof(float), n, f, path.c_str());
    if (m && v) {
        if (!meta->has_optimizer) {
            fclose(f);
            runtime_error("resume from a training checkpoint, or use --init-from", "checkpoint '%s' has no optimizer state", path.c_str());
        }
        fread_check(m, sizeof(float), n, f, path.c_str());
        fread_check(v, sizeof(float), n, f, path.c_str());
    }
    fclose(f);
}
