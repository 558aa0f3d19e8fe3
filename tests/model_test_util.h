// model_test_util.h — checking a model (an imported Hugging Face config, a preset) in one call:
// its dimensions (layers, hidden, heads and KV heads always, the FFN width, vocabulary and
// sequence length where the test states them) and its layer's form.
#pragma once

#include <gtest/gtest.h>

#include "ptd/spec/job_spec.h"

namespace ptd_test {

struct ModelDims {
    int layers, hidden, heads, kv_heads;
    int ffn_hidden = 0, vocab = 0, seq_len = 0;  // 0: not stated by the test
};

inline void expect_dims(const ptd::ModelSpec& m, const ModelDims& want) {
    EXPECT_EQ(m.layers, want.layers);
    EXPECT_EQ(m.hidden, want.hidden);
    EXPECT_EQ(m.heads, want.heads);
    EXPECT_EQ(m.kv_heads, want.kv_heads);
    if (want.ffn_hidden) {
        EXPECT_EQ(m.ffn_hidden, want.ffn_hidden);
    }
    if (want.vocab) {
        EXPECT_EQ(m.vocab, want.vocab);
    }
    if (want.seq_len) {
        EXPECT_EQ(m.seq_len, want.seq_len);
    }
}

// The layer's form: tied embeddings, norm, activation, position encoding, biases.
struct ModelForm {
    bool tied_embeddings;
    ptd::Norm norm;
    ptd::Activation activation;
    ptd::Position position;
    bool bias;
};

inline void expect_form(const ptd::ModelSpec& m, const ModelForm& want) {
    EXPECT_EQ(m.tied_embeddings, want.tied_embeddings);
    EXPECT_EQ(m.norm, want.norm);
    EXPECT_EQ(m.activation, want.activation);
    EXPECT_EQ(m.position, want.position);
    EXPECT_EQ(m.bias, want.bias);
}

}  // namespace ptd_test
