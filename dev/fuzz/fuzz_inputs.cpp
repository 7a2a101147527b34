// dev/fuzz/fuzz_inputs.cpp: coverage-guided fuzzing of everything the trainer reads from a user:
// checkpoints, token shards, tokenizer files, multiple-choice files and the command line. The rule under test is the
// project's: every bad input gets a clear error (here: a VpError, since VP_ERRORS_THROW turns
// runtime_error/usage_error into exceptions), never a crash, a hang, an out-of-bounds access or
// undefined behaviour (AddressSanitizer and UBSan watch every run).
//
// One source; for libFuzzer one binary per target (-DFUZZ_CHECKPOINT, -DFUZZ_SHARD, ...):
//   FUZZ_CHECKPOINT  the input is a checkpoint file, which the real train_main resumes (and trains
//                    one step from) or --init-from loads (and evaluates and samples from): header,
//                    run text, model config, value path, data position, weights
//   FUZZ_SHARD       the input is a token shard: dataloader_init, batches, get/set state
//   FUZZ_TOKENIZER   the input is a tokenizer file (vptok, llm.c's, GPT-2's encoder.json)
//   FUZZ_FLAGS       the input is a command line (NUL-separated words): parsed and validated
//                    through the model config, as train_main does before it builds anything
//   FUZZ_MC          the input is a multiple-choice file (.vpmc, --eval-mc): loaded, then scored
//                    by a tiny model (rows cut to T + 1, batches padded)
//
// Built two ways (fuzz.mk):
//   make fuzz          clang -fsanitize=fuzzer,address,undefined: libFuzzer's own main; run as
//                      build/fuzz/fuzz_checkpoint dev/fuzz/corpus/checkpoint -max_total_time=600
//   make test          g++ -fsanitize=address,undefined with -DFUZZ_REPLAY: one binary of every
//                      target (build/fuzz/replay, run as its links replay_<target>) whose main
//                      runs each file of the committed corpus (dev/fuzz/corpus/<target>/) once, so
//                      every input that once crashed stays a regression test, in CI, without clang.
#define TESTING
#ifndef VP_ERRORS_THROW
#define VP_ERRORS_THROW
#endif
#include "train_gpt_cpu.cpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

static std::string fuzz_dir;  // a private temporary directory, made once

// VP_FUZZ_VERBOSE=1: the trainer's output and each refusal's message, to see what an input reached
static void fuzz_refused(const VpError& e) {
    if (getenv("VP_FUZZ_VERBOSE")) fprintf(stderr, "refused (exit %d): %s\n", e.code, e.what());
}

static void fuzz_write_file(const std::string& path, const uint8_t* data, size_t size) {
    FILE* f = fopen(path.c_str(), "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
}

// removes every file of directory d (one level: the trainer's --out-dir holds files only)
static void fuzz_clear_dir(const std::string& d) {
    DIR* dir = opendir(d.c_str());
    if (!dir) return;
    while (dirent* e = readdir(dir)) {
        std::string name = e->d_name;
        if (name != "." && name != "..") unlink((d + "/" + name).c_str());
    }
    closedir(dir);
}

// A shard file of n tokens in [0, vocab): a fixed pattern, version 1 (uint16)
static void fuzz_write_shard(const std::string& path, int n, int vocab, int salt) {
    std::vector<uint8_t> b(SHARD_HEADER_BYTES + 2 * (size_t)n, 0);
    int32_t head[3] = {SHARD_MAGIC, 1, n};
    memcpy(b.data(), head, sizeof(head));
    for (int i = 0; i < n; i++) {
        int t = (i * 7 + salt * 13 + (i / 5)) % vocab;
        b[SHARD_HEADER_BYTES + 2 * i] = (uint8_t)t;
        b[SHARD_HEADER_BYTES + 2 * i + 1] = (uint8_t)(t >> 8);
    }
    fuzz_write_file(path, b.data(), b.size());
}

static void fuzz_setup() {
    if (!fuzz_dir.empty()) return;
    char tmpl[] = "/tmp/vpfuzz_XXXXXX";
    if (!mkdtemp(tmpl)) abort();
    fuzz_dir = tmpl;
    mkdir((fuzz_dir + "/data").c_str(), 0755);
    mkdir((fuzz_dir + "/run").c_str(), 0755);
    fuzz_write_shard(fuzz_dir + "/data/train_000.bin", 400, 64, 0);
    fuzz_write_shard(fuzz_dir + "/data/train_001.bin", 333, 64, 1);
    // the trainer talks on stdout; a fuzzer runs it hundreds of times a second
    if (!getenv("VP_FUZZ_VERBOSE") && !freopen("/dev/null", "w", stdout)) abort();
    atexit([] {
        for (const char* sub : {"/data", "/run", "/shard", ""}) {
            fuzz_clear_dir(fuzz_dir + sub);
            rmdir((fuzz_dir + sub).c_str());
        }
    });
}

// Runs train_main with these arguments; a VpError (a clear error) is the expected way to fail.
static void fuzz_train(std::vector<std::string> args) {
    args.insert(args.begin(), "train_cpu");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(&a[0]);
    argv.push_back(nullptr);
    try {
        train_main<CpuModel>((int)args.size(), argv.data());
    } catch (const VpError& e) {
        fuzz_refused(e);
    }
}

#if defined(FUZZ_CHECKPOINT) || defined(FUZZ_REPLAY)
// data[0] picks the use: bit 0 -> --resume 1 (train one step) or --init-from (evaluate and
// sample); bit 1 -> the file is data[1..] as given, or data[1..] followed by as many weight bytes
// as its header asks for (so that mutations of the header get past the size check); bit 2 -> the
// CRCs of a version-2 header are made to match (a file whose content is wrong but whose CRCs
// are right, as a buggy tool could write). Together they let mutations reach the config,
// value-path, data-position and weight checks. The weights added are small and finite.
static void fuzz_one_checkpoint(const uint8_t* data, size_t size) {
    if (size < 1) return;
    int mode = data[0];
    std::string ckpt = fuzz_dir + "/run/ckpt_00000002.bin";
    fuzz_clear_dir(fuzz_dir + "/run");
    std::vector<uint8_t> file(data + 1, data + size);
    CheckpointHeader h;
    bool have_header = file.size() >= sizeof(h);
    if (have_header) memcpy(&h, file.data(), sizeof(h));
    bool sane = have_header && h.num_params > 0 && h.num_params <= (1 << 20) && h.run_text_bytes >= 0 && h.run_text_bytes <= (1 << 20);
    if ((mode & 2) && sane) {
        int64_t floats = h.num_params * (h.has_optimizer ? 3 : 1);
        int64_t have = (int64_t)file.size() - (int64_t)sizeof(h) - h.run_text_bytes;
        if (have >= 0 && have < floats * 4) {
            for (int64_t i = have / 4; i < floats; i++) {
                float w = 0.02f * (float)((i * 2654435761u) % 1000) / 1000.0f - 0.01f;
                const uint8_t* p = (const uint8_t*)&w;
                file.insert(file.end(), p, p + 4);
            }
        }
    }
    if ((mode & 4) && sane && h.version == CHECKPOINT_VERSION && (int64_t)file.size() >= (int64_t)sizeof(h) + h.run_text_bytes) {
        size_t body = sizeof(h) + (size_t)h.run_text_bytes;
        h.data_crc = crc32_update(0, file.data() + body, file.size() - body);
        h.header_crc = checkpoint_header_crc(h, std::string((const char*)file.data() + sizeof(h), (size_t)h.run_text_bytes));
        memcpy(file.data(), &h, sizeof(h));
    }
    fuzz_write_file(ckpt, file.data(), file.size());
    std::string train = fuzz_dir + "/data/train_*.bin";
    if (mode & 1)
        fuzz_train({"--train-data", train, "--out-dir", fuzz_dir + "/run", "--resume", "1", "--max-steps", "3", "--seq-len", "8",
                    "--batch-size", "2", "--eval-every", "0", "--sample-every", "0"});
    else
        fuzz_train({"--init-from", ckpt, "--max-steps", "0", "--seq-len", "8", "--val-data", train, "--eval-batches", "2",
                    "--sample-every", "1", "--sample-tokens", "12"});
}
#endif
#if defined(FUZZ_SHARD) || defined(FUZZ_REPLAY)
// The input is the shard file; data[0] picks shuffled or not and B, T.
static void fuzz_one_shard(const uint8_t* data, size_t size) {
    if (size < 1) return;
    int mode = data[0];
    std::string dir = fuzz_dir + "/shard";
    mkdir(dir.c_str(), 0755);
    fuzz_write_file(dir + "/s_000.bin", data + 1, size - 1);
    int B = 1 + (mode >> 1 & 3), T = 1 + (mode >> 3 & 7);
    try {
        DataLoader dl;
        dataloader_init(&dl, (dir + "/s_*.bin").c_str(), B, T, 50257, (mode & 1) != 0, 1337, 0, 1);
        std::vector<int> in((size_t)B * T), tg((size_t)B * T);
        for (int i = 0; i < 5; i++) dataloader_next_batch(&dl, in.data(), tg.data());
        DataLoaderState s = dataloader_get_state(&dl);
        dataloader_set_state(&dl, &s);
        dataloader_next_batch(&dl, in.data(), tg.data());
        dataloader_free(&dl);
    } catch (const VpError& e) {
        fuzz_refused(e);
    }
}
#endif
#if defined(FUZZ_TOKENIZER) || defined(FUZZ_REPLAY)
static void fuzz_one_tokenizer(const uint8_t* data, size_t size) {
    std::string path = fuzz_dir + "/tokenizer.bin";
    fuzz_write_file(path, data, size);
    try {
        Tokenizer tok;
        tokenizer_init(&tok, path.c_str());
        int V = tokenizer_vocab_size(&tok);
        std::vector<int> ids;
        for (int id = -2; id < std::min(V, 4096) + 2; id++) {
            ids.push_back(id);
            volatile size_t n = strlen(tokenizer_decode(&tok, id));
            (void)n;
        }
        tokenizer_print(&tok, ids.data(), (int)ids.size(), stdout);
        if (tokenizer_can_encode(&tok)) {
            // fixed texts, then the input's own last bytes as text (valid UTF-8 or not): every id
            // an encoder returns must be a token of the vocabulary
            std::string tail((const char*)data + size - std::min<size_t>(size, 200), std::min<size_t>(size, 200));
            for (const std::string& text : {std::string("Hello  world's 12\n\n x\xc2\xa0y \xe6\x97\xa5\xe2\x96\x81"), std::string(" "), tail}) {
                std::vector<int> enc;
                if (!tokenizer_encode(&tok, text, &enc)) continue;
                for (int id : enc)
                    if (id < 0 || id >= V) abort();
            }
        }
        tokenizer_free(&tok);
    } catch (const VpError& e) {
        fuzz_refused(e);
    }
}
#endif
#if defined(FUZZ_FLAGS) || defined(FUZZ_REPLAY)
// The input is argv[1..], NUL-separated (at most 64 words).
static void fuzz_one_flags(const uint8_t* data, size_t size) {
    std::vector<std::string> words(1, "train_cpu");
    std::string cur;
    for (size_t i = 0; i < size && words.size() < 64; i++) {
        if (data[i] == 0) {
            words.push_back(cur);
            cur.clear();
        } else {
            cur.push_back((char)data[i]);
        }
    }
    if (!cur.empty()) words.push_back(cur);
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(&w[0]);
    argv.push_back(nullptr);
    try {
        RunConfig rc;
        if (!parse_command_line(&rc, (int)words.size(), argv.data())) return;  // --help
        validate_run_flags(rc);
        if (!rc.init_from.empty() || rc.resume) return;  // a checkpoint: the checkpoint target's work
        ModelConfig c = model_config_from_flags(rc);
        validate_run_config(rc, c);
        std::string text = run_config_to_text(rc);
        (void)text;
    } catch (const VpError& e) {
        fuzz_refused(e);
    }
}
#endif
#if defined(FUZZ_MC) || defined(FUZZ_REPLAY)
// The input is a .vpmc file; data[0] picks B (1..4) and T (1..8). A file that loads (for a
// vocabulary of 64) is scored by a 1-layer model built for it.
static void fuzz_one_mc(const uint8_t* data, size_t size) {
    if (size < 1) return;
    int mode = data[0], B = 1 + (mode & 3), T = 1 + (mode >> 2 & 7);
    std::string path = fuzz_dir + "/mc.vpmc";
    fuzz_write_file(path, data + 1, size - 1);
    try {
        McSet set;
        mc_load(&set, path, 64);
        RunConfig rc;
        const char* argv[] = {"fuzz", "--layers", "1", "--heads", "2", "--dim", "8", "--vocab", "64", "--max-seq", "16"};
        parse_command_line(&rc, (int)(sizeof(argv) / sizeof(argv[0])), (char**)argv);
        CpuModel model;
        gpt_build(&model, model_config_from_flags(rc));
        gpt_init_params(&model, 1);
        McResult r = evaluate_mc(&model, set, B, T);
        gpt_free(&model);
        if (!(r.acc >= 0 && r.acc <= 1 && r.acc_norm >= 0 && r.acc_norm <= 1 && r.acc_tokavg >= 0 && r.acc_tokavg <= 1)) abort();
    } catch (const VpError& e) {
        fuzz_refused(e);
    }
}
#endif

// the libFuzzer build fuzzes one target (its own binary); the replay build holds all five
#if defined(FUZZ_CHECKPOINT)
#define FUZZ_ONE fuzz_one_checkpoint
#elif defined(FUZZ_SHARD)
#define FUZZ_ONE fuzz_one_shard
#elif defined(FUZZ_TOKENIZER)
#define FUZZ_ONE fuzz_one_tokenizer
#elif defined(FUZZ_FLAGS)
#define FUZZ_ONE fuzz_one_flags
#elif defined(FUZZ_MC)
#define FUZZ_ONE fuzz_one_mc
#elif !defined(FUZZ_REPLAY)
#error "define one of FUZZ_CHECKPOINT, FUZZ_SHARD, FUZZ_TOKENIZER, FUZZ_FLAGS, FUZZ_MC (or FUZZ_REPLAY for the replay of all five)"
#endif

#ifndef FUZZ_REPLAY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_setup();
    FUZZ_ONE(data, size);
    return 0;
}
#else
// --make-seeds DIR: writes this target's starting corpus (valid inputs of each kind, which the
// fuzzer then mutates) into DIR. The committed corpus began as these.
static void fuzz_seed(const std::string& dir, const std::string& name, int mode, const std::vector<uint8_t>& body) {
    std::vector<uint8_t> b;
    if (mode >= 0) b.push_back((uint8_t)mode);
    b.insert(b.end(), body.begin(), body.end());
    fuzz_write_file(dir + "/" + name, b.data(), b.size());
}

static std::vector<uint8_t> fuzz_read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

static void le32(std::vector<uint8_t>& b, uint32_t v) {
    for (int k = 0; k < 4; k++) b.push_back((uint8_t)(v >> (8 * k)));
}

static void fuzz_make_seeds_checkpoint(const std::string& dir) {
    // a real checkpoint of each family, trained 2 steps on the harness's data
    const std::vector<std::vector<std::string>> models = {
        {"--arch", "gpt2", "--layers", "1", "--heads", "2", "--dim", "8", "--vocab", "64", "--max-seq", "16"},
        {"--arch", "llama", "--layers", "2", "--heads", "2", "--kv-heads", "1", "--qk-norm", "1", "--dim", "8", "--ffn-dim", "8",
         "--vocab", "64", "--max-seq", "16"}};
    for (size_t k = 0; k < models.size(); k++) {
        fuzz_clear_dir(fuzz_dir + "/run");
        std::vector<std::string> args = models[k];
        for (const char* a : {"--seq-len", "8", "--batch-size", "2", "--max-steps", "2", "--eval-every", "0", "--sample-every", "0"}) args.push_back(a);
        args.push_back("--train-data");
        args.push_back(fuzz_dir + "/data/train_*.bin");
        args.push_back("--out-dir");
        args.push_back(fuzz_dir + "/run");
        fuzz_train(args);
        std::vector<uint8_t> f = fuzz_read_file(fuzz_dir + "/run/ckpt_00000002.bin");
        if (f.size() < sizeof(CheckpointHeader)) abort();
        CheckpointHeader h;
        memcpy(&h, f.data(), sizeof(h));
        std::vector<uint8_t> head(f.begin(), f.begin() + sizeof(h) + h.run_text_bytes);
        std::string fam = k == 0 ? "gpt2" : "llama";
        fuzz_seed(dir, fam + "_resume_whole", 1, f);       // as written: resume
        fuzz_seed(dir, fam + "_init_whole", 0, f);         // as written: --init-from
        fuzz_seed(dir, fam + "_resume_head", 2 | 4 | 1, head);  // the header only, the rest made up
        fuzz_seed(dir, fam + "_init_head", 2 | 4, head);
        CheckpointHeader v1 = h;  // the version without CRCs
        v1.version = CHECKPOINT_VERSION_NO_CRC;
        v1.header_crc = v1.data_crc = 0;
        memcpy(head.data(), &v1, sizeof(v1));
        fuzz_seed(dir, fam + "_v1_resume_head", 2 | 1, head);
    }
}

static void fuzz_make_seeds_shard(const std::string& dir) {
    for (int version : {1, 2}) {
        std::vector<uint8_t> b;
        le32(b, SHARD_MAGIC);
        le32(b, (uint32_t)version);
        le32(b, 50);
        b.resize(SHARD_HEADER_BYTES, 0);
        for (int i = 0; i < 50; i++) {
            uint32_t t = (uint32_t)(i * 977 % 50257);
            for (int k = 0; k < (version == 1 ? 2 : 4); k++) b.push_back((uint8_t)(t >> (8 * k)));
        }
        fuzz_seed(dir, "v" + std::to_string(version) + "_shuffled", 1 | (1 << 1) | (3 << 3), b);
        fuzz_seed(dir, "v" + std::to_string(version) + "_ordered", 0 | (0 << 1) | (7 << 3), b);
    }
}

static void fuzz_make_seeds_tokenizer(const std::string& dir) {
    const char* words[] = {"a", "b", "ab", " the", "\xc4\xa0x", "<|endoftext|>"};
    std::vector<uint8_t> vp;
    le32(vp, VPTOK_MAGIC);
    le32(vp, VPTOK_VERSION);
    le32(vp, 6);
    le32(vp, 5);
    vp.resize(VPTOK_HEADER_BYTES, 0);
    for (const char* w : words) {
        le32(vp, (uint32_t)strlen(w));
        vp.insert(vp.end(), w, w + strlen(w));
    }
    fuzz_seed(dir, "vptok", -1, vp);
    // version 2 with encoders: byte-level BPE (every byte, 3 merges, an added "  ", NFC first), then
    // SentencePiece (unk, <s>, every byte as a <0xNN> piece, 3 scored pieces, a dummy prefix).
    // Header slots: magic, version, N, eot, kind, merges, added, flags (bit 0 either way), unk id 0
    std::vector<std::string> bpe_toks, spm_toks = {"<unk>", "<s>"};
    for (int b = 0; b < 256; b++) bpe_toks.push_back(std::string(1, (char)b)), spm_toks.push_back(std::string(1, (char)b));
    bpe_toks.insert(bpe_toks.end(), {"ab", "abc", " t", "  "});
    spm_toks.insert(spm_toks.end(), {" ", " a", "ab"});
    auto vptok_v2 = [&](const std::vector<std::string>& toks, int kind) {
        std::vector<uint8_t> b;
        for (int32_t v : {(int32_t)VPTOK_MAGIC, 2, (int32_t)toks.size(), 1, kind, kind == 1 ? 3 : 0, kind == 1 ? 1 : 0, 1, 0}) le32(b, (uint32_t)v);
        b.resize(VPTOK_HEADER_BYTES, 0);
        for (const std::string& t : toks) {
            le32(b, (uint32_t)t.size());
            b.insert(b.end(), t.begin(), t.end());
        }
        return b;
    };
    std::vector<uint8_t> bpe = vptok_v2(bpe_toks, 1);
    for (int v : std::initializer_list<int>{'a', 'b', 256, 256, 'c', 257, ' ', 't', 258, 259}) le32(bpe, (uint32_t)v);  // 3 triples, then the added id
    fuzz_seed(dir, "vptok_bpe", -1, bpe);
    std::vector<uint8_t> spm = vptok_v2(spm_toks, 2);
    for (size_t i = 0; i < spm_toks.size(); i++) {
        float score = i < 258 ? 0.0f : -1.0f * (float)(i - 257);
        uint32_t bits;
        memcpy(&bits, &score, 4);
        le32(spm, bits);
        le32(spm, i == 0 ? 2 : i == 1 ? 3 : i < 258 ? 6 : 1);  // unknown, control, byte, normal
    }
    fuzz_seed(dir, "vptok_spm", -1, spm);
    std::vector<uint8_t> llmc;
    le32(llmc, LLMC_TOKENIZER_MAGIC);
    le32(llmc, 2);
    le32(llmc, 6);
    le32(llmc, 5);
    llmc.resize(1024, 0);
    for (const char* w : words) {
        llmc.push_back((uint8_t)strlen(w));
        llmc.insert(llmc.end(), w, w + strlen(w));
    }
    fuzz_seed(dir, "llmc", -1, llmc);
    std::string json = "{\"a\": 0, \"b\": 1, \"ab\": 2, \"\\u0120the\": 3, \"\u0120x\": 4, \"<|endoftext|>\": 5}\n";
    fuzz_seed(dir, "encoder_json", -1, std::vector<uint8_t>(json.begin(), json.end()));
}

static void fuzz_make_seeds_flags(const std::string& dir) {
    const std::vector<std::vector<std::string>> lines = {
        {"--arch", "gpt2", "--layers", "4", "--heads", "4", "--dim", "128", "--max-seq", "128", "--seq-len", "128", "--batch-size", "8",
         "--max-steps", "300", "--lr", "1e-3", "--train-data", "x_*.bin", "--total-batch-tokens", "2048"},
        {"--arch", "llama", "--layers", "2", "--heads", "8", "--kv-heads", "2", "--qk-norm", "1", "--dim", "64", "--ffn-dim", "96",
         "--rope-theta", "1e6", "--val-data", "a=x_*.bin", "--val-data", "b=y_*.bin", "--grad-clip", "0", "--warmup-steps", "10", "--train-data", "x_*.bin"},
        {"--vocab", "50257", "--seed", "7", "--weight-decay", "0.1", "--min-lr-frac", "0.1", "--checkpoint-every", "5", "--zero", "1",
         "--out-dir", "runs/x", "--train-data", "x_*.bin"}};
    int k = 0;
    for (const auto& words : lines) {
        std::vector<uint8_t> b;
        for (const std::string& w : words) {
            b.insert(b.end(), w.begin(), w.end());
            b.push_back(0);
        }
        fuzz_seed(dir, "line" + std::to_string(k++), -1, b);
    }
}

static void fuzz_make_seeds_mc(const std::string& dir) {
    // two examples (3 and 2 choices), then one with a long context and ending that T cuts
    std::vector<int32_t> body = {3, 2, 2, 1, 4, 2, 9, 1, 3, 7, 8, 1, 2, 3, 4, 2, 0, 1, 3, 11, 1, 2, 9, 5, 6, 7, 8,
                                 2, 1, 12, 9, 30, 1, 5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22};
    for (int examples : {2, 3}) {
        std::vector<uint8_t> b;
        size_t ints = examples == 2 ? 27 : body.size();
        for (int32_t v : {MC_MAGIC, MC_VERSION, examples, 64, (int)ints}) le32(b, (uint32_t)v);
        b.resize(4 * 8, 0);
        for (char ch : std::string("test")) b.push_back((uint8_t)ch);
        b.resize(4 * MC_HEADER_INTS, 0);
        for (size_t i = 0; i < ints; i++) le32(b, (uint32_t)body[i]);
        fuzz_seed(dir, "examples" + std::to_string(examples) + "_b2_t8", 1 | (7 << 2), b);
        fuzz_seed(dir, "examples" + std::to_string(examples) + "_b1_t2", 0 | (1 << 2), b);
    }
}

// The replay binary holds every target; it runs as build/fuzz/replay_<target> (a link to it,
// fuzz.mk), the target named by the link, or as `replay <target> ...`.
struct FuzzTarget {
    const char* name;
    void (*one)(const uint8_t* data, size_t size);
    void (*make_seeds)(const std::string& dir);
};
static const FuzzTarget FUZZ_TARGETS[] = {{"checkpoint", fuzz_one_checkpoint, fuzz_make_seeds_checkpoint},
                                          {"shard", fuzz_one_shard, fuzz_make_seeds_shard},
                                          {"tokenizer", fuzz_one_tokenizer, fuzz_make_seeds_tokenizer},
                                          {"flags", fuzz_one_flags, fuzz_make_seeds_flags},
                                          {"mc", fuzz_one_mc, fuzz_make_seeds_mc}};
static const FuzzTarget* fuzz_target_named(const std::string& name) {
    for (const FuzzTarget& t : FUZZ_TARGETS)
        if (name == t.name) return &t;
    return nullptr;
}

// An input to replay must be a regular file that opens: why not, in *why. fuzz_read_file reads a
// missing file as no bytes, so a mistyped corpus path used to replay one empty input, "1 passed".
static bool fuzz_replayable(const std::string& path, std::string* why) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
        *why = strerror(errno);
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        *why = "neither a regular file nor a directory that opens";
        return false;
    }
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) {
        *why = strerror(errno);
        return false;
    }
    fclose(f);
    return true;
}

// make test: every file named (or every file in every directory named) runs once; exit 0 if none
// crashed (a crash ends the process with the sanitizer's report and a nonzero code). A path that
// does not exist or cannot be read is an error (exit 1, naming it), never an input.
int main(int argc, char** argv) {
    std::string self = argv[0];
    self = self.substr(self.find_last_of('/') + 1);
    const FuzzTarget* target = self.rfind("replay_", 0) == 0 ? fuzz_target_named(self.substr(7)) : nullptr;
    int first = 1;
    if (!target && argc > 1 && (target = fuzz_target_named(argv[1]))) first = 2;
    if (!target) {
        fprintf(stderr, "usage: %s TARGET [--make-seeds DIR | FILE_OR_DIR...], TARGET one of checkpoint, shard, tokenizer, flags, mc "
                        "(or run it as replay_TARGET, a link to it, as make test does: build/fuzz/replay_checkpoint ...)\n", argv[0]);
        return 2;
    }
    if (argc - first == 2 && std::string(argv[first]) == "--make-seeds") {
        fuzz_setup();
        if (mkdir(argv[first + 1], 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "cannot make '%s': %s (does its parent exist?)\n", argv[first + 1], strerror(errno));
            return 1;
        }
        target->make_seeds(argv[first + 1]);
        return 0;
    }
    int runs = 0;
    for (int a = first; a < argc; a++) {
        std::vector<std::string> files;
        if (DIR* dir = opendir(argv[a])) {
            while (dirent* e = readdir(dir))
                if (e->d_name[0] != '.') files.push_back(std::string(argv[a]) + "/" + e->d_name);
            closedir(dir);
            std::sort(files.begin(), files.end());
        } else {
            files.push_back(argv[a]);
        }
        for (const std::string& f : files) {
            std::string why;
            if (!fuzz_replayable(f, &why)) {
                fprintf(stderr, "cannot replay '%s': %s\n", f.c_str(), why.c_str());
                return 1;
            }
            std::vector<uint8_t> bytes = fuzz_read_file(f);
            fuzz_setup();
            target->one(bytes.data(), bytes.size());
            runs++;
        }
    }
    fprintf(stderr, "%d passed, 0 failed (inputs replayed: each one refused with a clear error or accepted, none crashed)\n", runs);
    return 0;
}
#endif
