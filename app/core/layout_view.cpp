// layout_view.cpp — text and JSON views of a job's rank layout.
#include "layout_view.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "ptd/model/model_stats.h"

namespace ptd {

static int digits(long long v) {
    int d = 1;
    while (v >= 10) {
        v /= 10;
        ++d;
    }
    return d;
}

std::string job_summary_text(const JobSpec& job, const Term& term) {
    const ModelSpec& m = job.model;
    const ParamCounts pc = count_parameters(m);
    const ClusterSpec& c = job.cluster;
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    std::string out;
    out += bold(term, "model   ") + fmt("%s (%s): %s parameters", m.name.c_str(), to_string(m.arch),
                                       human_count((double)pc.total).c_str());
    if (m.experts > 1) out += fmt(", %s active (%d experts, top-%d)", human_count((double)pc.active).c_str(), m.experts, m.top_k);
    out += fmt("\n        %d layers, hidden %d, %d heads (%d KV), ffn %d, vocab %d, seq %d\n", m.layers, m.hidden,
               m.heads, m.kv_heads, m.ffn_hidden, m.vocab, m.seq_len);
    if (const std::string details = model_shape_details(m); !details.empty()) out += "        " + details + "\n";  // mlaio
    out += bold(term, "cluster ") + fmt("%d node%s × %d %s = %d GPUs, %.0f GiB each; intra %.0f GB/s, inter %.0f GB/s per GPU\n",
                                        c.nodes, c.nodes == 1 ? "" : "s", c.gpus_per_node, c.gpu.name.c_str(), c.world_size(), c.gpu.memory_gib,
                                        c.intra_gbps, c.inter_gbps);
    {  // nccl: the network the collectives model uses (collectives.cpp)
        out += bold(term, "network ") + describe_network(job);
        if (!job.origin.network_source.empty()) out += " (" + job.origin.network_source + ")";
        if (job.origin.network_generic && job.cluster.gpu.link != GpuLink::loopback)
            out += yellow(term, " — GENERIC: no cluster preset describes these nodes; name cluster.preset or set "
                                "nics_per_node and nic_gbps");
        out += "\n";
    }
    if (!job.has_layout()) {
        out += bold(term, "parallel") + " none chosen (no [parallel] table): `ptd plan` chooses the layout\n";
        out += bold(term, "training") +
               (t.global_batch > 0 ? fmt(" global batch %d (%s tokens/step), %s, %s\n", t.global_batch,
                                         human_count((double)t.global_batch * m.seq_len).c_str(),
                                         to_string(t.precision), to_string(t.optimizer))
                                   : fmt(" global batch not given, %s, %s\n", to_string(t.precision), to_string(t.optimizer)));
        return out;
    }
    out += bold(term, "parallel") + fmt(" tp %d × pp %d × dp %d", p.tp, p.pp, p.dp);
    if (p.cp > 1) out += fmt(" × cp %d", p.cp);
    if (p.ep > 1) out += fmt(", ep %d", p.ep);
    // batchchoice: a value the job leaves out and PTD chose is listed with the stack's defaults.
    const auto chosen = [&job](std::string_view key) {
        return std::any_of(job.origin.stack_defaults.begin(), job.origin.stack_defaults.end(),
                           [key](const StackDefault& d) { return d.key == key; });
    };
    if (p.vpp > 1) out += fmt(", vpp %d%s", p.vpp, chosen("parallel.vpp") ? " (chosen)" : "");
    if (!p.pipeline_layout.empty()) out += ", layout \"" + p.pipeline_layout + "\"";
    out += fmt(", zero %d%s%s, recompute %s, order %s\n", p.zero, p.distributed_optimizer ? ", distributed optimizer" : "",
               p.sequence_parallel ? ", sequence parallel" : "", to_string(p.recompute), p.order.c_str());
    out += bold(term, "training") + fmt(" micro-batch %d%s × %d accumulation × dp %d = global batch %d (%s tokens/step), %s, %s\n",
                                        t.micro_batch, chosen("training.micro_batch") ? " (chosen)" : "", job.grad_accum(), p.dp, t.global_batch,
                                        human_count((double)t.global_batch * m.seq_len).c_str(), to_string(t.precision),
                                        to_string(t.optimizer));
    return out;
}

std::string layout_degrees_text(const JobSpec& job, const RankLayout& L) {
    std::string out = fmt("tp %d × cp %d × dp %d × pp %d", L.degree[DIM_TP], L.degree[DIM_CP], L.degree[DIM_DP],
                          L.degree[DIM_PP]);
    if (L.req.ep > 1) out += fmt(", ep %d", L.req.ep);
    if (L.req.etp > 0 && L.req.etp != L.req.tp) out += fmt(", expert tp %d", L.req.etp);
    if (job.parallel.vpp > 1) out += fmt(", vpp %d", job.parallel.vpp);
    return out;
}

std::vector<SpanningGroups> spanning_groups(const RankLayout& L) {
    auto count_of = [](const char* kind, const GroupSet& g) {
        SpanningGroups s{kind, 0, g.count};
        for (uint8_t spans : g.spans_nodes) s.spanning += spans;
        return s;
    };
    std::vector<SpanningGroups> out{count_of("TP", L.groups[DIM_TP]), count_of("CP", L.groups[DIM_CP]),
                                    count_of("EP", L.ep_groups)};
    // Folded expert TP (layout.cpp): groups of expert_tp consecutive ranks.
    if (const int etp = L.req.etp; etp > 0 && etp != L.req.tp && L.world % etp == 0) {
        SpanningGroups s{"expert TP", 0, L.world / etp};
        for (int g = 0; g < s.count; ++g)
            s.spanning += L.ranks[(size_t)g * etp].node != L.ranks[(size_t)g * etp + etp - 1].node;
        out.push_back(s);
    }
    return out;
}

std::vector<std::string> layout_span_warnings(const JobSpec& job, const RankLayout& L) {
    std::vector<std::string> out;
    for (const SpanningGroups& g : spanning_groups(L)) {
        if (g.spanning == 0) continue;
        const std::string_view kind = g.kind;
        const char* what = kind == "TP" ? "their all-reduces cross"
                           : kind == "CP" ? "their ring exchange of keys and values crosses"
                           : kind == "EP" ? "their token all-to-alls cross"
                                          : "their experts' all-reduces cross";
        out.push_back(fmt("%d of %d %s groups span nodes: %s the %.0f GB/s inter-node network instead of the %.0f GB/s "
                          "intra-node links",
                          g.spanning, g.count, g.kind, what, job.cluster.inter_gbps, job.cluster.intra_gbps));
    }
    return out;
}

static const char* color_by_name(ColorBy c) {
    switch (c) {
        case ColorBy::tp: return "TP group";
        case ColorBy::pp: return "PP stage";
        case ColorBy::dp: return "DP replica";
        case ColorBy::cp: return "CP rank";
    }
    return "?";
}

std::string render_layout_text(const JobSpec& job, const RankLayout& L, const std::vector<HostEntry>& hosts,
                               const LayoutViewOptions& opt, const Term& term) {
    std::string out;
    const int gpn = L.req.gpus_per_node;
    const char label_letter = opt.color_by == ColorBy::tp ? 't' : opt.color_by == ColorBy::pp ? 'p'
                            : opt.color_by == ColorBy::dp ? 'd' : 'c';
    const Dim color_dim = opt.color_by == ColorBy::tp ? DIM_TP : opt.color_by == ColorBy::pp ? DIM_PP
                  : opt.color_by == ColorBy::dp ? DIM_DP : DIM_CP;

    out += fmt("%d ranks = %s, order %s, %d node%s × %d GPUs\n", L.world, layout_degrees_text(job, L).c_str(),
               L.req.order.c_str(), L.nodes, L.nodes == 1 ? "" : "s", gpn);
    out += fmt("cells: rank %c<%s coordinate>, coloured by %s\n\n", label_letter, dim_name(color_dim), color_by_name(opt.color_by));

    const int rank_w = digits(std::max(0, L.world - 1));
    const int coord_w = digits(std::max(0, L.degree[color_dim] - 1));
    const int cell_w = rank_w + 2 + coord_w + 2;  // " r c " with padding
    std::string node_col_label = "node";
    int name_w = 7;
    for (const HostEntry& h : hosts) name_w = std::max<int>(name_w, (int)std::min<size_t>(h.host.size(), 20));
    name_w = std::max(name_w, 5 + digits(L.nodes));
    const int per_line = std::max(1, (term.width - name_w - 3) / (cell_w + 1));

    // Column header (GPU indices).
    std::string header(name_w + 2, ' ');
    for (int g = 0; g < std::min(gpn, per_line); ++g) {
        std::string h = fmt("gpu%d", g);
        header += fmt("%-*s", cell_w + 1, h.c_str());
    }
    out += dim(term, header) + "\n";

    auto draw_node = [&](int n) {
        std::string name = n < (int)hosts.size() && hosts[n].host != "localhost" ? hosts[n].host.substr(0, 20)
                                                                                   : fmt("node %d", n);
        const int first = n * gpn;
        const int last = std::min(L.world, first + gpn);
        for (int r = first, col = 0; r < last; ++r, ++col) {
            if (col % per_line == 0) {
                if (col) out += "\n";
                out += fmt("%-*s  ", name_w, col ? "" : name.c_str());
            }
            std::string cell = fmt(" %*d %c%-*d ", rank_w, r, label_letter, coord_w, L.ranks[r].coord[color_dim]);
            out += paint_group(term, cell, group_colour_key(L, opt.color_by, r));
            out += term.color ? " " : "|";
        }
        out += "\n";
    };
    const int shown = opt.max_nodes <= 0 || L.nodes <= opt.max_nodes ? L.nodes : opt.max_nodes - 1;
    for (int n = 0; n < shown; ++n) draw_node(n);
    if (shown < L.nodes) {
        if (L.nodes - shown > 1) out += dim(term, fmt("%*s  ⋮ %d more nodes (use --all to draw every node)", name_w, "", L.nodes - shown - 1)) + "\n";
        draw_node(L.nodes - 1);
    }

    // Group summary: each dimension's first groups on one line.
    auto group_line = [&](const std::string& name, const GroupSet& g, const std::string& suffix) {
        std::string line = fmt("%s groups: %d × %d ranks ", name.c_str(), g.count, g.size) + suffix;
        for (int gi = 0; gi < g.count; ++gi) {
            // Long groups are abbreviated to their first members and the last one.
            std::string s = "[";
            const int shown_members = g.size <= 10 ? g.size : 4;
            for (int k = 0; k < shown_members; ++k) s += (k ? " " : "") + std::to_string(g.begin(gi)[k]);
            if (shown_members < g.size) s += " … " + std::to_string(g.end(gi)[-1]);
            s += "] ";
            if ((int)(line.size() + s.size()) > term.width - 2) {
                line += "…";
                break;
            }
            line += s;
        }
        return line + "\n";
    };
    out += "\n";
    for (int d : {DIM_TP, DIM_CP, DIM_DP, DIM_PP}) {
        const GroupSet& g = L.groups[d];
        if (g.size == 1 && d != DIM_TP && d != DIM_DP && d != DIM_PP) continue;
        out += group_line(dim_name((Dim)d), g, "");
    }
    if (L.req.ep > 1) out += fmt("ep groups: %d × %d ranks (experts split %d ways)\n", L.ep_groups.count, L.ep_groups.size, L.req.ep);
    // hsdp: whom each rank shards the model states with (dp_replicate of them hold copies).
    if (const GroupSet& g = L.dp_shard_groups; g.count > 0)
        out += group_line("dp shard", g, fmt("(%d replicas) ", L.req.dp_replicate));

    const std::vector<std::string> warnings = layout_span_warnings(job, L);
    out += "\n";
    if (L.tp_groups_spanning_nodes == 0) out += green(term, "every TP group stays inside one node") + "\n";
    for (const std::string& w : warnings) out += yellow(term, "warning: " + w) + "\n";
    return out;
}

nlohmann::json layout_json(const JobSpec& job, const RankLayout& L, const std::vector<HostEntry>& hosts) {
    using nlohmann::json;
    json j;
    j["schema"] = "ptd.layout/1";
    j["job"] = job.origin.file;
    j["world"] = L.world;
    j["nodes"] = L.nodes;
    j["gpus_per_node"] = L.req.gpus_per_node;
    j["order"] = L.req.order;
    j["degrees"] = {{"tp", L.degree[DIM_TP]}, {"cp", L.degree[DIM_CP]}, {"dp", L.degree[DIM_DP]},
                    {"pp", L.degree[DIM_PP]}, {"ep", L.req.ep},
                    {"expert_tp", L.req.etp > 0 ? L.req.etp : L.degree[DIM_TP]}};
    json ranks = json::array();
    for (int r = 0; r < L.world; ++r) {
        const RankPlace& p = L.ranks[r];
        ranks.push_back({{"rank", r},
                         {"node", p.node},
                         {"host", p.node < (int)hosts.size() ? hosts[p.node].host : ""},
                         {"local_gpu", p.local_gpu},
                         {"tp", p.coord[DIM_TP]},
                         {"cp", p.coord[DIM_CP]},
                         {"dp", p.coord[DIM_DP]},
                         {"pp", p.coord[DIM_PP]}});
    }
    j["ranks"] = std::move(ranks);
    auto groups = [](const GroupSet& g) {
        json arr = json::array();
        for (int gi = 0; gi < g.count; ++gi) arr.push_back(std::vector<int>(g.begin(gi), g.end(gi)));
        return arr;
    };
    j["groups"] = {{"tp", groups(L.groups[DIM_TP])},
                   {"cp", groups(L.groups[DIM_CP])},
                   {"dp", groups(L.groups[DIM_DP])},
                   {"pp", groups(L.groups[DIM_PP])},
                   {"ep", groups(L.ep_groups)},
                   {"expert_dp", groups(L.expert_dp_groups)},
                   {"dp_shard", groups(L.dp_shard_groups)}};  // hsdp: [] without replicas
    json spans = json::array();
    for (int gi = 0; gi < L.groups[DIM_TP].count; ++gi)
        if (L.groups[DIM_TP].spans_nodes[gi]) spans.push_back(gi);
    j["tp_groups_spanning_nodes"] = spans;
    auto spanning = [](const GroupSet& g) {
        json arr = json::array();
        for (int gi = 0; gi < g.count; ++gi)
            if (g.spans_nodes[gi]) arr.push_back(gi);
        return arr;
    };
    j["cp_groups_spanning_nodes"] = spanning(L.groups[DIM_CP]);
    j["ep_groups_spanning_nodes"] = spanning(L.ep_groups);
    return j;
}

std::string model_shape_details(const ModelSpec& m) {
    std::vector<std::string> parts;
    if (m.mla()) {
        parts.push_back(fmt("MLA: q_lora %s, kv_lora %d, q/k heads %d + %d RoPE, v heads %d",
                            m.q_lora_rank > 0 ? std::to_string(m.q_lora_rank).c_str() : "none", m.kv_lora_rank,
                            m.head_dim(), m.qk_rope_head_dim, m.v_head_dim));
    } else if (m.head_dim_given > 0) {
        parts.push_back(fmt("head_dim %d", m.head_dim_given));
    }
    if (m.qk_layernorm && !m.mla()) parts.push_back("q/k norms");
    if (m.experts > 1) {
        std::string moe;
        if (m.moe_ffn_hidden > 0) moe = fmt("experts %d wide", m.moe_ffn_hidden);
        if (m.shared_expert_ffn_hidden > 0)
            moe += (moe.empty() ? "" : ", ") + fmt("shared experts %d", m.shared_expert_ffn_hidden);
        if (m.first_dense_layers > 0)
            moe += (moe.empty() ? "" : ", ") + fmt("first %d layer%s dense (ffn %d)", m.first_dense_layers,
                                                   m.first_dense_layers == 1 ? "" : "s", m.ffn_hidden);
        if (m.moe_router_num_groups > 0)  // deepep: group-limited routing
            moe += (moe.empty() ? "" : ", ") + fmt("routing within %d of %d groups", m.moe_router_group_topk,
                                                   m.moe_router_num_groups);
        if (!moe.empty()) parts.push_back(moe);
    }
    if (m.mtp_layers > 0) parts.push_back(fmt("MTP %d", m.mtp_layers));
    std::string out;
    for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
    return out;
}

void add_model_shape_json(nlohmann::json& model, const ModelSpec& m) {
    for (const ModelShapeKey& k : model_shape_keys())
        if (m.*k.member != 0) model[k.name] = m.*k.member;
    if (m.qk_layernorm) model["qk_layernorm"] = true;
}

nlohmann::json job_json(const JobSpec& job) {
    using nlohmann::json;
    const ModelSpec& m = job.model;
    const ParamCounts pc = count_parameters(m);
    const ClusterSpec& c = job.cluster;
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    json j;
    j["file"] = job.origin.file;
    j["model"] = {{"name", m.name}, {"preset", job.origin.model_preset}, {"arch", to_string(m.arch)},
                  {"layers", m.layers}, {"hidden", m.hidden}, {"heads", m.heads}, {"kv_heads", m.kv_heads},
                  {"ffn_hidden", m.ffn_hidden}, {"vocab", m.vocab}, {"seq_len", m.seq_len},
                  {"tied_embeddings", m.tied_embeddings}, {"norm", to_string(m.norm)},
                  {"activation", to_string(m.activation)}, {"position", to_string(m.position)}, {"bias", m.bias},
                  {"qkv_bias", m.qkv_bias}, {"experts", m.experts}, {"top_k", m.top_k}, {"rope_theta", m.rope_theta},
                  {"norm_eps", m.norm_eps}, {"parameters", pc.total}, {"active_parameters", pc.active}};
    add_model_shape_json(j["model"], m);  // mlaio: only the keys the model sets
    j["cluster"] = {{"nodes", c.nodes}, {"gpus_per_node", c.gpus_per_node}, {"world_size", c.world_size()},
                    {"gpu", c.gpu.name}, {"memory_gib", c.gpu.memory_gib}, {"intra_gbps", c.intra_gbps},
                    {"inter_gbps", c.inter_gbps}, {"hosts", c.hosts}};
    j["parallel"] = {{"tp", p.tp}, {"pp", p.pp}, {"dp", p.dp}, {"cp", p.cp}, {"ep", p.ep}, {"vpp", p.vpp},
                     {"zero", p.zero}, {"distributed_optimizer", p.distributed_optimizer},
                     {"sequence_parallel", p.sequence_parallel}, {"recompute", to_string(p.recompute)},
                     {"order", p.order}, {"layers_per_stage", p.layers_per_stage}};
    if (!job.has_layout()) j["parallel"] = nullptr;  // no [parallel] table: the planner's to choose
    j["training"] = {{"micro_batch", t.micro_batch}, {"global_batch", t.global_batch},
                     {"grad_accum", job.grad_accum()}, {"precision", to_string(t.precision)},
                     {"optimizer", to_string(t.optimizer)}, {"steps", t.steps}};
    return j;
}

}  // namespace ptd
