// dev/reference/reference_state.h: reads the reference states of dev/reference/make_states.py.
//
// Header-only, no dependency beyond the C++17 standard library and host/config.h, so that both
// the CPU test (tests/test_reference_states.cpp) and the GPU test (test_gpt) can include it.
// The file format is documented at the top of dev/reference/make_states.py:
//   "VPSTATE1" | uint32 version (1) | uint32 J | J bytes of JSON | data block (arrays at byte
//   offsets given in the JSON, float32 "f32" or int32 "i32", little-endian, C order)
// Everything is checked (magic, version, offsets inside the file, shapes, known keys), and a
// problem is reported as a message, never by exiting: a test must fail, not skip, on a bad state.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "host/config.h"

// ----------------------------------------------------------------------------
// A minimal JSON reader: objects, arrays, numbers, strings (escapes \" \\ \/ \n \t \r \b \f,
// \uXXXX as '?'), true, false, null. Numbers are parsed with strtod, so the float64 values the
// Python side prints (shortest round-trip repr) come back bit-exact.

struct Json {
    enum Type { NUL, BOOL, NUM, STR, ARR, OBJ } type = NUL;
    double num = 0;
    bool b = false;
    std::string str;
    std::vector<Json> arr;
    std::vector<std::pair<std::string, Json>> obj;  // in file order

    const Json* find(const std::string& key) const {
        for (const auto& kv : obj)
            if (kv.first == key) return &kv.second;
        return nullptr;
    }
};

struct JsonParser {
    const char* p;
    const char* end;
    std::string err;

    void ws() {
        while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    }
    bool fail(const char* what) {
        if (err.empty()) err = what;
        return false;
    }
    bool lit(const char* s) {
        size_t n = strlen(s);
        if ((size_t)(end - p) < n || strncmp(p, s, n)) return false;
        p += n;
        return true;
    }
    bool string(std::string* out) {
        if (p >= end || *p != '"') return fail("expected a string");
        p++;
        while (p < end && *p != '"') {
            char c = *p++;
            if (c == '\\') {
                if (p >= end) return fail("bad escape");
                char e = *p++;
                switch (e) {
                    case 'n': c = '\n'; break;
                    case 't': c = '\t'; break;
                    case 'r': c = '\r'; break;
                    case 'b': c = '\b'; break;
                    case 'f': c = '\f'; break;
                    case 'u':
                        if (end - p < 4) return fail("bad \\u escape");
                        p += 4;
                        c = '?';
                        break;
                    default: c = e;  // \" \\ \/
                }
            }
            out->push_back(c);
        }
        if (p >= end) return fail("unterminated string");
        p++;
        return true;
    }
    bool value(Json* v, int depth = 0) {
        if (depth > 64) return fail("nesting too deep");
        ws();
        if (p >= end) return fail("unexpected end of JSON");
        if (*p == '{') {
            v->type = Json::OBJ;
            p++;
            ws();
            if (p < end && *p == '}') { p++; return true; }
            while (true) {
                ws();
                std::pair<std::string, Json> kv;
                if (!string(&kv.first)) return false;
                ws();
                if (p >= end || *p++ != ':') return fail("expected ':'");
                if (!value(&kv.second, depth + 1)) return false;
                v->obj.push_back(std::move(kv));
                ws();
                if (p < end && *p == ',') { p++; continue; }
                if (p < end && *p == '}') { p++; return true; }
                return fail("expected ',' or '}'");
            }
        }
        if (*p == '[') {
            v->type = Json::ARR;
            p++;
            ws();
            if (p < end && *p == ']') { p++; return true; }
            while (true) {
                Json e;
                if (!value(&e, depth + 1)) return false;
                v->arr.push_back(std::move(e));
                ws();
                if (p < end && *p == ',') { p++; continue; }
                if (p < end && *p == ']') { p++; return true; }
                return fail("expected ',' or ']'");
            }
        }
        if (*p == '"') {
            v->type = Json::STR;
            return string(&v->str);
        }
        if (lit("true")) { v->type = Json::BOOL; v->b = true; return true; }
        if (lit("false")) { v->type = Json::BOOL; return true; }
        if (lit("null")) { v->type = Json::NUL; return true; }
        if (lit("NaN") || lit("Infinity") || lit("-Infinity")) return fail("non-finite number in JSON");
        std::string num;
        while (p < end && strchr("+-0123456789.eE", *p)) num.push_back(*p++);
        if (num.empty()) return fail("unexpected character");
        char* e = nullptr;
        v->type = Json::NUM;
        v->num = strtod(num.c_str(), &e);
        if (*e) return fail("bad number");
        return true;
    }
};

inline bool json_parse(const std::string& text, Json* out, std::string* err) {
    JsonParser ps{text.data(), text.data() + text.size(), ""};
    bool ok = ps.value(out);
    ps.ws();
    if (ok && ps.p != ps.end) ok = ps.fail("trailing characters after JSON");
    if (!ok) *err = ps.err + " at byte " + std::to_string(ps.p - text.data());
    return ok;
}

// ----------------------------------------------------------------------------
// The state

struct RefLayoutEntry {
    std::string name;
    size_t offset, count;  // elements in the flat parameter array
    int decay;
};

struct RefTrain {
    int steps = 0, warmup = 0, max_steps = 0;
    float lr = 0, min_lr_frac = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0, grad_clip = 0;  // float32 values
    std::vector<double> lrs;         // (steps) lr of step k
    std::vector<double> grad_norms;  // (steps) global gradient norm of step k, before clipping
    std::vector<double> losses;      // (steps + 1) loss after k updates
};

struct RefState {
    std::string name, path;
    Json header;
    ModelConfig config;
    int B = 0, T = 0;
    size_t num_params = 0;
    std::vector<RefLayoutEntry> layout;
    double loss = 0;                  // float64 mean cross-entropy
    RefTrain train;                   // (only if has_train)
    bool has_train = true;            // false: "train" is null (the extreme-regime states have no trajectory)
    bool fp32_check = true;           // false: compare the float64 run only ("fp32_check": false, written by
                                      // fuzz_states.py where float32 rounding alone moves the results near a bound)
    std::vector<float> params, grads; // (num_params)
    std::vector<int> inputs, targets; // (B, T)
    std::vector<float> logits;        // (B, T, V) real vocab columns only
    std::vector<float> losses;        // (B, T) per-position cross-entropy
    // [offset, count] ranges of the flat gradient that are zero by construction (padded vocab
    // rows, positions >= T, unseen tokens of an untied embedding, lambda_0, SLA dead slices)
    std::vector<std::pair<size_t, size_t>> zero_grad_ranges;
};

namespace refstate_detail {

struct Reader {
    std::string* err;
    bool ok = true;
    bool fail(const std::string& msg) {
        if (ok) *err = msg;
        ok = false;
        return false;
    }
    const Json* get(const Json& o, const char* key, Json::Type t) {
        const Json* v = o.type == Json::OBJ ? o.find(key) : nullptr;
        if (!v || v->type != t) {
            fail(std::string("JSON header: missing or mistyped key '") + key + "'");
            return nullptr;
        }
        return v;
    }
    double num(const Json& o, const char* key) {
        const Json* v = get(o, key, Json::NUM);
        return v ? v->num : 0;
    }
    int integer(const Json& o, const char* key) {
        double d = num(o, key);
        if (ok && (d != std::floor(d) || std::fabs(d) > 2e9)) fail(std::string("JSON header: '") + key + "' is not an integer");
        return (int)d;
    }
    std::string str(const Json& o, const char* key) {
        const Json* v = get(o, key, Json::STR);
        return v ? v->str : "";
    }
    std::vector<double> nums(const Json& o, const char* key) {
        std::vector<double> out;
        const Json* v = get(o, key, Json::ARR);
        if (!v) return out;
        for (const Json& e : v->arr) {
            if (e.type != Json::NUM) {
                fail(std::string("JSON header: '") + key + "' holds a non-number");
                return out;
            }
            out.push_back(e.num);
        }
        return out;
    }
};

}  // namespace refstate_detail

// Reads and checks one state. Returns false with a message in *err on any problem.
inline bool ref_state_read(const std::string& path, RefState* s, std::string* err) {
    using refstate_detail::Reader;
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) {
        *err = "cannot open '" + path + "': " + strerror(errno) + " (run the test from the repository root)";
        return false;
    }
    std::string raw;
    char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0) raw.append(buf, got);
    fclose(f);
    s->path = path;
    if (raw.size() < 16 || raw.compare(0, 8, "VPSTATE1") != 0) {
        *err = "'" + path + "' is not a valuepath reference state (bad magic)";
        return false;
    }
    uint32_t version, jlen;
    memcpy(&version, raw.data() + 8, 4);
    memcpy(&jlen, raw.data() + 12, 4);
    if (version != 1) {
        *err = "'" + path + "' has state format " + std::to_string(version) + "; this reader knows 1";
        return false;
    }
    if ((size_t)jlen > raw.size() - 16) {
        *err = "'" + path + "' is truncated (JSON header)";
        return false;
    }
    std::string jerr;
    if (!json_parse(raw.substr(16, jlen), &s->header, &jerr)) {
        *err = "'" + path + "': bad JSON header: " + jerr;
        return false;
    }
    const size_t data = 16 + (size_t)jlen;
    Reader r{err};
    const Json& h = s->header;
    s->name = r.str(h, "name");
    s->B = r.integer(h, "B");
    s->T = r.integer(h, "T");
    s->num_params = (size_t)r.num(h, "num_params");
    s->loss = r.num(h, "loss");
    // config: every ModelConfig / ValuePathConfig field (tie_embeddings: absent in the states
    // written before it existed, which are untied)
    const Json* c = r.get(h, "config", Json::OBJ);
    if (!r.ok) return false;
    ModelConfig& m = s->config;
    memset(&m, 0, sizeof(m));
    m.arch = r.integer(*c, "arch_id");
    m.n_layer = r.integer(*c, "n_layer");
    m.n_head = r.integer(*c, "n_head");
    m.n_kv_head = r.integer(*c, "n_kv_head");
    m.n_embd = r.integer(*c, "n_embd");
    m.head_dim = r.integer(*c, "head_dim");
    m.ffn_dim = r.integer(*c, "ffn_dim");
    m.vocab_size = r.integer(*c, "vocab_size");
    m.padded_vocab_size = r.integer(*c, "padded_vocab_size");
    m.max_seq_len = r.integer(*c, "max_seq_len");
    m.rope_theta = (float)r.num(*c, "rope_theta");
    m.qk_norm = r.integer(*c, "qk_norm");
    m.norm_eps = (float)r.num(*c, "norm_eps");
    m.vp.path = r.integer(*c, "path_id");
    m.vp.resformer_learn = r.integer(*c, "resformer_learn");
    m.vp.resformer_lambda_lr = (float)r.num(*c, "resformer_lambda_lr");
    m.vp.sla_layers = r.integer(*c, "sla_layers");
    m.vp.sla_heads = r.integer(*c, "sla_heads");
    m.vp.sla_chain = r.integer(*c, "sla_chain");
    m.vp.depth_stride = r.integer(*c, "depth_stride");
    if (c->find("tie_embeddings")) m.tie_embeddings = r.integer(*c, "tie_embeddings");
    if (!r.ok) return false;
    if (m.arch != ARCH_GPT2 && m.arch != ARCH_LLAMA) return r.fail("config: unknown arch_id");
    if (m.vp.path < VP_VANILLA || m.vp.path > VP_DEPTH) return r.fail("config: unknown path_id");
    // layout
    const Json* lay = r.get(h, "layout", Json::ARR);
    if (!r.ok) return false;
    size_t next = 0;
    for (const Json& e : lay->arr) {
        RefLayoutEntry le;
        le.name = r.str(e, "name");
        le.offset = (size_t)r.num(e, "offset");
        le.count = (size_t)r.num(e, "count");
        le.decay = r.integer(e, "decay");
        if (!r.ok) return false;
        if (le.offset != next || le.count == 0) return r.fail("layout: tensor '" + le.name + "' is not contiguous");
        next += le.count;
        s->layout.push_back(le);
    }
    if (next != s->num_params) return r.fail("layout does not add up to num_params");
    const Json* zr = r.get(h, "zero_grad_ranges", Json::ARR);
    if (!r.ok) return false;
    for (const Json& e : zr->arr) {
        if (e.type != Json::ARR || e.arr.size() != 2 || e.arr[0].type != Json::NUM || e.arr[1].type != Json::NUM)
            return r.fail("zero_grad_ranges: entries must be [offset, count]");
        size_t off = (size_t)e.arr[0].num, cnt = (size_t)e.arr[1].num;
        if (off + cnt > s->num_params) return r.fail("zero_grad_ranges: a range runs past num_params");
        s->zero_grad_ranges.push_back({off, cnt});
    }
    if (const Json* f = h.find("fp32_check")) {  // (absent: true)
        if (f->type != Json::BOOL) return r.fail("JSON header: 'fp32_check' is not true or false");
        s->fp32_check = f->b;
    }
    // training trajectory, or null (an extreme-regime state: make_states.py EXTREME)
    const Json* t = h.find("train");
    s->has_train = !(t && t->type == Json::NUL);
    if (s->has_train) {
    t = r.get(h, "train", Json::OBJ);
    if (!r.ok) return false;
    RefTrain& tr = s->train;
    tr.steps = r.integer(*t, "steps");
    tr.warmup = r.integer(*t, "warmup");
    tr.max_steps = r.integer(*t, "max_steps");
    tr.lr = (float)r.num(*t, "lr");
    tr.min_lr_frac = (float)r.num(*t, "min_lr_frac");
    tr.beta1 = (float)r.num(*t, "beta1");
    tr.beta2 = (float)r.num(*t, "beta2");
    tr.eps = (float)r.num(*t, "eps");
    tr.weight_decay = (float)r.num(*t, "weight_decay");
    tr.grad_clip = (float)r.num(*t, "grad_clip");
    tr.lrs = r.nums(*t, "lrs");
    tr.grad_norms = r.nums(*t, "grad_norms");
    tr.losses = r.nums(*t, "losses");
    if (!r.ok) return false;
    if (tr.steps < 1 || tr.lrs.size() != (size_t)tr.steps || tr.grad_norms.size() != (size_t)tr.steps || tr.losses.size() != (size_t)tr.steps + 1)
        return r.fail("train: lrs, grad_norms, losses do not match steps");
    }
    // arrays
    const Json* arrs = r.get(h, "arrays", Json::ARR);
    if (!r.ok) return false;
    const size_t V = (size_t)m.vocab_size;
    struct Want { const char* name; const char* dtype; std::vector<size_t> shape; void* dst; } want[] = {
        {"params", "f32", {s->num_params}, &s->params},   {"grads", "f32", {s->num_params}, &s->grads},
        {"inputs", "i32", {(size_t)s->B, (size_t)s->T}, &s->inputs},
        {"targets", "i32", {(size_t)s->B, (size_t)s->T}, &s->targets},
        {"logits", "f32", {(size_t)s->B, (size_t)s->T, V}, &s->logits},
        {"losses", "f32", {(size_t)s->B, (size_t)s->T}, &s->losses},
    };
    for (Want& w : want) {
        const Json* a = nullptr;
        for (const Json& e : arrs->arr)
            if (e.type == Json::OBJ && e.find("name") && e.find("name")->str == w.name) a = &e;
        if (!a) return r.fail(std::string("arrays: '") + w.name + "' is missing");
        if (r.str(*a, "dtype") != w.dtype) return r.fail(std::string("arrays: '") + w.name + "' has the wrong dtype");
        std::vector<double> shape = r.nums(*a, "shape");
        size_t off = (size_t)r.num(*a, "offset");
        if (!r.ok) return false;
        size_t count = 1;
        bool same = shape.size() == w.shape.size();
        for (size_t i = 0; i < shape.size(); i++) {
            count *= (size_t)shape[i];
            same = same && (size_t)shape[i] == w.shape[i];
        }
        if (!same) return r.fail(std::string("arrays: '") + w.name + "' has an unexpected shape");
        if (data + off + 4 * count > raw.size()) return r.fail(std::string("arrays: '") + w.name + "' runs past the end of the file (truncated?)");
        if (!strcmp(w.dtype, "f32")) {
            auto* v = (std::vector<float>*)w.dst;
            v->resize(count);
            memcpy(v->data(), raw.data() + data + off, 4 * count);
        } else {
            auto* v = (std::vector<int>*)w.dst;
            v->resize(count);
            memcpy(v->data(), raw.data() + data + off, 4 * count);
        }
    }
    for (int tok : s->inputs)
        if (tok < 0 || tok >= m.vocab_size) return r.fail("inputs: token out of range");
    for (int tok : s->targets)
        if (tok < 0 || tok >= m.vocab_size) return r.fail("targets: token out of range");
    return r.ok;
}

// The names of the committed states (dev/reference/make_states.py, state_names()).
inline std::vector<std::string> ref_state_names() {
    std::vector<std::string> out;
    for (const char* fam : {"gpt2", "llama"})
        for (const char* var : {"vanilla", "resformer_fixed", "resformer_learn", "svformer", "sla_orig", "sla_chain", "depth"})
            out.push_back(std::string(fam) + "_" + var);
    out.push_back("llamatied_vanilla");  // llama with --tie-embeddings 1 (make_states.py FAMILY_VARIANTS)
    out.push_back("gpt2x_vanilla");      // the extreme regime: logit gaps past fp32 underflow, peaked attention
    out.push_back("llamax_depth");       // (make_states.py EXTREME; no trajectory)
    out.push_back("qwen3_depth");        // llama with --head-dim 8 at C = 16 (H*D = 2C), tied, QK-norm
    return out;
}

// max_i |a_i - ref_i| / max_i |ref_i|: the error relative to the tensor's scale (the metric of
// every array comparison against the states). *worst gets the index of the largest difference.
// A NaN or inf on either side is INFINITY at the first such index: it returns at once, because
// every comparison with a NaN is false, so a running maximum would let a later finite difference
// replace it ({NaN,2,3,4.0001} vs {1,2,3,4} came out 2.5e-5, {1,NaN,3,4} came out 0).
template <typename A>
inline double ref_scaled_err(const A* a, const float* ref, size_t n, size_t* worst = nullptr) {
    double scale = 0, maxd = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double x = (double)a[i], r = (double)ref[i];
        if (!std::isfinite(x) || !std::isfinite(r)) {
            if (worst) *worst = i;
            return INFINITY;
        }
        scale = std::max(scale, std::fabs(r));
        double d = std::fabs(x - r);
        if (d > maxd) {
            maxd = d;
            wi = i;
        }
    }
    if (worst) *worst = wi;
    return scale > 0 ? maxd / scale : maxd;
}
