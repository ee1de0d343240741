"""Modded-nanogpt's recipe elements that add weights to the model, each against what it
promises: U-net skips, value embeddings and the bigram hash embedding. Each is proven against
a forward written out by hand or an equal change of weights, exactly off when off, through the
KV cache and a saved run, and refused by every export format."""

import pytest
import torch

from lmlab import LanguageModel, MaskSpec, preset
from lmlab.distill.student import cut_from
from lmlab.export.targets import ExportError
from lmlab.export.writer import export_run
from lmlab.model.heads import make_head
from lmlab.model.layers import bigram_rows
from lmlab.runs.run import load_run
from tests.hf_runs import pretrained_run
from tests.test_kv_cache import decode_and_compare

VOCAB = 50
CAUSAL = MaskSpec("causal")
# Each element's switch, on; the elements' tests below run for each.
ELEMENTS = {"unet_skips": dict(unet_skips=True), "value_embeddings": dict(value_embeddings=1),
            "bigram_hash": dict(bigram_hash=64)}
PAIRING_LAYERS = ("unet_skips", "value_embeddings")  # the elements that pair layers by depth


def model(family="modern", n_layers=4, seed=0, **changes) -> LanguageModel:
    torch.manual_seed(seed)
    cfg = preset(f"{family}-tiny", VOCAB, 32, n_layers=n_layers, dropout=0.0, **changes)
    return LanguageModel(cfg, heads=("lm",)).eval()


def ids(rows=2, length=12) -> torch.Tensor:
    return torch.randint(0, VOCAB, (rows, length), generator=torch.Generator().manual_seed(1))


def embedded(m: LanguageModel, x: torch.Tensor) -> torch.Tensor:
    backbone = m.backbone
    positions = torch.arange(x.shape[1])
    h = backbone.token_embedding(x)
    if backbone.bigram_embedding is not None:  # modded-nanogpt's hash of (previous, current)
        before = torch.cat((x[:, :1], x[:, :-1]), dim=1)
        rows = ((36313 * x) ^ (27191 * before)) % (backbone.cfg.bigram_hash - 1)
        rows[:, 0] = backbone.cfg.bigram_hash - 1  # the first token: nothing before it
        h = h + backbone.bigram_embedding.weight[rows]
    if backbone.position_embedding is not None:
        h = h + backbone.position_embedding(positions)
    if backbone.token_type_embedding is not None:
        h = h + backbone.token_type_embedding(torch.zeros_like(x))
    return backbone.embedding_norm(h), (backbone.rotary(positions)
                                        if backbone.rotary is not None else None)


def by_hand(m: LanguageModel, x: torch.Tensor, partners: dict[int, int]) -> torch.Tensor:
    """The backbone's forward written out: `partners` maps a block to the earlier block
    whose output joins its input, times skip weight `index`."""
    h, rotary = embedded(m, x)
    outputs = []
    for index, block in enumerate(m.backbone.blocks):
        if index in partners:
            source, weight = partners[index]
            h = h + m.backbone.skip_weights[weight] * outputs[source]
        h = block(h, CAUSAL, rotary, None)
        outputs.append(h)
    return m.backbone.final_norm(h)


@pytest.mark.parametrize("family", ["modern", "gpt2", "bert"])
@pytest.mark.parametrize(("n_layers", "partners"), [
    (4, {2: (1, 1), 3: (0, 0)}),
    (5, {3: (1, 1), 4: (0, 0)}),  # the middle block, 2, has no partner
    (2, {1: (0, 0)}),
])
def test_unet_skips_join_block_i_to_block_n_minus_1_minus_i(family, n_layers, partners):
    m = model(family, n_layers, unet_skips=True)
    assert m.backbone.skip_weights.shape == (n_layers // 2,)
    assert torch.equal(m.backbone.skip_weights, torch.ones(n_layers // 2))  # as modded-nanogpt
    with torch.no_grad():
        m.backbone.skip_weights.copy_(torch.linspace(0.5, 1.5, n_layers // 2))
        hidden = m(ids(), CAUSAL)["hidden"]
        assert hidden.shape == (2, 12, 64)
        torch.testing.assert_close(hidden, by_hand(m, ids(), partners))
        plain = by_hand(m, ids(), {})
    assert not torch.allclose(hidden, plain, atol=1e-5)  # post-norm: nearly scale-blind


def test_gradients_reach_every_skip_weight():
    m = model(n_layers=6, unet_skips=True).train()
    m(ids(), CAUSAL)["lm"].square().mean().backward()
    assert m.backbone.skip_weights.grad.shape == (3,)
    assert (m.backbone.skip_weights.grad != 0).all()


def test_unet_skips_off_is_the_plain_forward_and_adds_no_weights():
    plain, skipped = model(), model(unet_skips=True)
    assert set(skipped.state_dict()) - set(plain.state_dict()) == {"backbone.skip_weights"}
    with torch.no_grad():
        assert torch.equal(plain(ids(), CAUSAL)["hidden"], by_hand(plain, ids(), {}))
        skipped.backbone.skip_weights.zero_()  # the same weights, skips at zero
        assert torch.equal(skipped(ids(), CAUSAL)["lm"], plain(ids(), CAUSAL)["lm"])
    assert "unet_skips" not in plain.cfg.to_dict()
    with pytest.raises(ValueError, match="unet_skips needs at least 2 layers"):
        plain.cfg.with_changes(n_layers=1, unet_skips=True)


def with_scales(m: LanguageModel, scales: list[float | None]) -> LanguageModel:
    """`m` with each layer's value-embedding scale set (None: a layer without one)."""
    with torch.no_grad():
        for block, scale in zip(m.backbone.blocks, scales, strict=True):
            assert (block.attn.value_scale is None) == (scale is None)
            if scale is not None:
                block.attn.value_scale.fill_(scale)
    return m


def test_value_embedding_table_j_feeds_layers_j_and_n_minus_1_minus_j():
    m = model(n_layers=5, value_embeddings=2)
    assert [block.attn.value_scale is not None for block in m.backbone.blocks] == [
        True, True, False, True, True]  # the middle layer reads none
    assert all(block.attn.value_scale == 0.5 for block in m.backbone.blocks
               if block.attn.value_scale is not None)
    assert [table.weight.shape for table in m.backbone.value_embeddings] == [(VOCAB, 64)] * 2
    reads = {0: {0, 4}, 1: {1, 3}}
    for layer in (0, 1, 3, 4):  # only this layer's scale left on: which tables move it?
        alone = with_scales(model(n_layers=5, value_embeddings=2),
                            [0.5 if i == layer else 0.0 if i != 2 else None for i in range(5)])
        with torch.no_grad():
            before = alone(ids(), CAUSAL)["hidden"]
            for table in (0, 1):
                weight = alone.backbone.value_embeddings[table].weight
                kept = weight.clone()
                weight.mul_(3.0)
                moved = not torch.equal(alone(ids(), CAUSAL)["hidden"], before)
                weight.copy_(kept)
                assert moved == (layer in reads[table]), (layer, table)


def test_value_embeddings_are_added_to_the_values_times_the_scale():
    """A vector c added to every value moves each attention output by c (softmax rows sum to
    1): exactly what adding c to the value rows of the qkv bias does."""
    torch.manual_seed(0)
    cfg = preset("gpt2-tiny", VOCAB, 32, value_embeddings=1, n_kv_heads=1, dropout=0.0)
    attention = LanguageModel(cfg, heads=("lm",)).backbone.blocks[0].attn
    assert attention.head_counts == (2, 1, 1)  # grouped: the tables hold one head's width
    x, c = torch.randn(2, 7, 64), torch.randn(32)
    with torch.no_grad():
        attention.value_scale.fill_(0.7)
        given = attention(x, CAUSAL, None, values=c.expand(2, 7, 32))
        attention.qkv.bias[-32:] += 0.7 * c
        attention.value_scale.zero_()
        torch.testing.assert_close(given, attention(x, CAUSAL, None, values=c.expand(2, 7, 32)))


def test_gradients_reach_the_value_tables_and_scales():
    m = model(n_layers=4, value_embeddings=2).train()
    m(ids(), CAUSAL)["lm"].square().mean().backward()
    for table in m.backbone.value_embeddings:
        assert table.weight.grad.abs().sum() > 0
    assert all(block.attn.value_scale.grad != 0 for block in m.backbone.blocks)


def test_value_embeddings_off_is_the_plain_forward_and_adds_no_weights():
    plain, added = model(), model(value_embeddings=2)
    extra = set(added.state_dict()) - set(plain.state_dict())
    assert extra == {"backbone.value_embeddings.0.weight", "backbone.value_embeddings.1.weight",
                     *(f"backbone.blocks.{i}.attn.value_scale" for i in range(4))}
    added.load_state_dict(plain.state_dict(), strict=False)  # the same weights, scales at 0
    with_scales(added, [0.0] * 4)
    with torch.no_grad():
        assert torch.equal(plain(ids(), CAUSAL)["hidden"], by_hand(plain, ids(), {}))
        assert torch.equal(added(ids(), CAUSAL)["lm"], plain(ids(), CAUSAL)["lm"])
    assert "value_embeddings" not in plain.cfg.to_dict()
    assert plain.num_parameters(False) == added.num_parameters(False) - 4  # the tables: embeddings
    with pytest.raises(ValueError, match=r"between 0 and n_layers // 2 = 2, got 3"):
        plain.cfg.with_changes(value_embeddings=3)


@pytest.mark.parametrize("element", ELEMENTS)
@pytest.mark.parametrize("family", ["modern", "gpt2"])
def test_cached_decoding_equals_full_forward(element, family):
    m = model(family, n_layers=5, **ELEMENTS[element])
    with torch.no_grad():  # weights away from their start, so every element contributes
        for parameter in m.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape))
    decode_and_compare(m, ids(2, 11), prompt_len=5, mask_for=lambda seg: CAUSAL)


@pytest.mark.parametrize("element", ELEMENTS)
def test_a_saved_run_loads_back_with_the_element_and_its_weights(tmp_path, element):
    path = pretrained_run(tmp_path / "run", "modern", "clm", **ELEMENTS[element])
    run = load_run(path)
    for name, value in ELEMENTS[element].items():
        assert getattr(run.model.cfg, name) == value
    torch.manual_seed(0)  # the run's weights before pretrained_run jittered them
    fresh = LanguageModel(run.model.cfg, heads=tuple(run.model.heads)).state_dict()
    added = set(fresh) - set(model().state_dict())
    assert added
    loaded = run.model.state_dict()
    for name in added:  # the saved values came back, not the initial ones
        assert not torch.equal(loaded[name], fresh[name]), name
    x = torch.randint(0, run.model.cfg.vocab_size, (2, 9), generator=torch.Generator())
    with torch.no_grad():
        assert torch.equal(run.model(x, CAUSAL)["lm"], load_run(path).model(x, CAUSAL)["lm"])


@pytest.mark.parametrize("element", ELEMENTS)
@pytest.mark.parametrize("format", ["hf", "gguf", "sentence-transformers"])
def test_every_export_format_refuses_the_element_in_one_line(tmp_path, element, format):
    run = load_run(pretrained_run(tmp_path / "run", "modern", "clm", **ELEMENTS[element]))
    with pytest.raises(ExportError, match=element) as error:
        export_run(run, tmp_path / "out", format=format)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("element", PAIRING_LAYERS)
def test_distilling_by_cutting_layers_is_refused_in_one_line(element):
    teacher = model(n_layers=4, **ELEMENTS[element])
    with pytest.raises(ValueError, match="--layers cuts models without") as error:
        cut_from(teacher, 2, lambda cfg: {"lm": make_head("lm", cfg)})
    assert "\n" not in str(error.value)


def test_recomputed_blocks_give_the_same_gradients_with_every_element():
    def gradients(recompute: bool) -> dict:
        m = model(n_layers=4, **{k: v for on in ELEMENTS.values() for k, v in on.items()})
        m.train().backbone.checkpoint_blocks = recompute
        m(ids(), CAUSAL)["lm"].square().mean().backward()
        return {name: p.grad for name, p in m.named_parameters()}

    plain, recomputed = gradients(False), gradients(True)
    assert all(torch.equal(plain[name], recomputed[name]) for name in plain)


def test_bigram_rows_hash_each_token_with_the_one_before_it():
    x = torch.tensor([[3, 7, 7, 2, 9]])
    pairs = [(3, 7), (7, 7), (7, 2), (2, 9)]  # (previous, current) of positions 1..4
    hashed = [((36313 * now) ^ (27191 * before)) % 99 for before, now in pairs]
    assert bigram_rows(x, 100).tolist() == [[99, *hashed]]  # the first has none before it
    assert bigram_rows(x, 100, previous=torch.tensor([5])).tolist()[0][0] == (
        (36313 * 3) ^ (27191 * 5)) % 99  # a cache's last token
    assert len(set(bigram_rows(torch.tensor([[a, 4] for a in range(20)]), 1000)[:, 1].tolist())) > 1


def test_bigram_rows_restart_at_documents_and_after_padding():
    x = torch.tensor([[3, 7, 2, 9, 4]])
    documents = torch.tensor([[1, 1, 2, 2, 2]])
    rows = bigram_rows(x, 100, segments=documents)
    assert rows[0, 0] == rows[0, 2] == 99  # each document's first token
    assert torch.equal(rows[:, 3:], bigram_rows(x[:, 2:], 100)[:, 1:])
    padded = torch.tensor([[0, 0, 3, 7, 2]])
    assert torch.equal(bigram_rows(padded, 100, segments=torch.tensor([[0, 0, 1, 1, 1]]))[:, 2:],
                       bigram_rows(padded[:, 2:], 100))  # left padding: as if unpadded
    step = bigram_rows(torch.tensor([[5]]), 100, previous=torch.tensor([2]),
                       segments=torch.tensor([[1, 1, 2]]))  # a cached step, a new document
    assert step.tolist() == [[99]]


@pytest.mark.parametrize("family", ["modern", "gpt2", "bert"])
def test_the_bigram_table_is_added_to_the_token_embedding(family):
    m = model(family, bigram_hash=64)
    assert m.backbone.bigram_embedding.weight.shape == (64, 64)
    with torch.no_grad():
        hidden = m(ids(), CAUSAL)["hidden"]
        torch.testing.assert_close(hidden, by_hand(m, ids(), {}))
        m.backbone.bigram_embedding.weight.zero_()
        assert not torch.allclose(hidden, m(ids(), CAUSAL)["hidden"], atol=1e-4)


def test_the_output_reads_the_previous_token_through_the_table_and_no_later_one():
    m = model(n_layers=1, bigram_hash=64)
    x = ids()
    changed = x.clone()
    changed[:, 5] = (x[:, 5] + 1) % VOCAB
    with torch.no_grad():
        first = m(x, CAUSAL)["hidden"]
        assert torch.equal(m(changed, CAUSAL)["hidden"][:, :5], first[:, :5])  # causal
        mixing = m.backbone.blocks[0].attn.out.weight
        mixing.zero_()  # attention passes nothing on: only the table reads position 5
        alone = m(x, CAUSAL)["hidden"]
        moved = m(changed, CAUSAL)["hidden"]
        assert not torch.equal(moved[:, 6], alone[:, 6])  # position 6 reads token 5
        assert torch.equal(moved[:, 7:], alone[:, 7:])
        m.backbone.bigram_embedding.weight.zero_()  # the table off: position 6 no longer moves
        assert torch.equal(m(changed, CAUSAL)["hidden"][:, 6], m(x, CAUSAL)["hidden"][:, 6])


def test_bigram_hash_off_is_the_plain_forward_and_adds_no_weights():
    plain, added = model(), model(bigram_hash=64)
    assert set(added.state_dict()) - set(plain.state_dict()) == {
        "backbone.bigram_embedding.weight"}
    assert plain.backbone.bigram_embedding is None
    added.load_state_dict(plain.state_dict(), strict=False)  # the same weights, the table at 0
    with torch.no_grad():
        added.backbone.bigram_embedding.weight.zero_()
        assert torch.equal(plain(ids(), CAUSAL)["hidden"], by_hand(plain, ids(), {}))
        assert torch.equal(added(ids(), CAUSAL)["lm"], plain(ids(), CAUSAL)["lm"])
    assert "bigram_hash" not in plain.cfg.to_dict()
    assert plain.num_parameters(False) == added.num_parameters(False)  # the table: an embedding
    for size in (-1, 1):
        with pytest.raises(ValueError, match="bigram_hash must be 0 .off. or at least 2 rows"):
            plain.cfg.with_changes(bigram_hash=size)


def test_cutting_layers_keeps_the_bigram_table():
    teacher = model(n_layers=4, bigram_hash=64)
    student = cut_from(teacher, 2, lambda cfg: {"lm": make_head("lm", cfg)})
    assert torch.equal(student.backbone.bigram_embedding.weight,
                       teacher.backbone.bigram_embedding.weight)


def test_cached_decoding_of_left_padded_prompts_reads_bigrams_as_unpadded():
    m = model(n_layers=2, bigram_hash=64)
    x = torch.randint(0, VOCAB, (2, 10), generator=torch.Generator().manual_seed(2))
    segments = torch.ones_like(x)
    segments[1, :3] = 0  # the second prompt is padded on the left
    decode_and_compare(m, x, prompt_len=6, segments=segments,
                       mask_for=lambda seg: MaskSpec("causal", segment_ids=seg))
