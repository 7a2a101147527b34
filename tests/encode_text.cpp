// tests/encode_text.cpp: the C++ prompt encoder (host/tokenizer.h tokenizer_encode) as a filter,
// for tests/python/test_prompt_encode.py, which diffs it against the Python tokenizers.
//
//   build/tests/encode_text TOKENIZER_FILE < documents > ids
//   build/tests/encode_text --nfc < documents > code points     (host/unicode.h unicode_nfc alone)
//
// stdin: documents, each a little-endian uint32 byte length then that many bytes. stdout: one line
// per document, its token ids separated by spaces (--nfc: the NFC's code points in hex), or
// "invalid-utf8". Exit 1 (with the trainer's error) if the tokenizer file does not load or cannot
// encode.
#include <cstdio>
#include <cstring>
#include <vector>

#include "host/tokenizer.h"

// Reads the next document of stdin into doc; false at the end.
static bool read_document(std::string* doc) {
    unsigned char len_bytes[4];
    if (fread(len_bytes, 1, 4, stdin) != 4) return false;
    doc->resize(tok_le32(len_bytes));
    if (!doc->empty() && fread(&(*doc)[0], 1, doc->size(), stdin) != doc->size()) runtime_error(nullptr, "stdin ends inside a document");
    return true;
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s TOKENIZER_FILE < documents\n       %s --nfc < documents\n", argv[0], argv[0]);
        return 2;
    }
    std::string doc;
    if (strcmp(argv[1], "--nfc") == 0) {
        std::vector<uint32_t> cps;
        std::vector<size_t> starts;
        while (read_document(&doc)) {
            if (!utf8_decode(doc, &cps, &starts)) {
                puts("invalid-utf8");
                continue;
            }
            std::vector<uint32_t> nfc = unicode_nfc(cps);
            for (size_t i = 0; i < nfc.size(); i++) printf(i ? " %X" : "%X", nfc[i]);
            putchar('\n');
        }
        return 0;
    }
    Tokenizer tok;
    tokenizer_init(&tok, argv[1]);
    if (!tokenizer_can_encode(&tok)) runtime_error(nullptr, "'%s' cannot encode: %s", argv[1], tok.encoder_missing.c_str());
    std::vector<int> ids;
    while (read_document(&doc)) {
        if (!tokenizer_encode(&tok, doc, &ids)) {
            puts("invalid-utf8");
            continue;
        }
        for (size_t i = 0; i < ids.size(); i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    }
    tokenizer_free(&tok);
    return 0;
}
