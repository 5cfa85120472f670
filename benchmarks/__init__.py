"""What the measuring tools drive, outside the installed mmvit5 package (nothing in mmvit5
imports it; the tools reach it through ``tools/benchmarks/``): the benchmark machinery behind
``tools/benchmark.py`` and ``tools/dry_run.py`` (throughput, latency, memory and FLOP
efficiency of the ViT-5 backbone next to its peers), the toy ablation study
(:mod:`.ablation`), the results harness (:mod:`.results`) and the tables generated from
results/ (:mod:`.tables`).

Measurement method (one run, one process, so every row sees the same machine state):

* Same conditions for every row: ``torch.set_num_threads(--threads)``, one seeded standard-normal
  input of ``--batch`` x 3 x S x S, weights and input cast to ``--dtype`` (no autocast; bf16 is
  the default on CUDA, float32 on CPU). Every backbone is built for the benchmarked size
  (``img_size=S``), so none pays a per-forward position-embedding resize, and all of them see
  (S / 16)^2 patch tokens.
* Modes: ``forward`` is ``model.eval()`` under ``torch.no_grad()``; ``train`` is ``model.train()``,
  forward, ``sum(output.sum())`` backward, gradients reset to ``None`` before each step (no
  optimizer step).
* Latency: the median over ``--repeats`` timed steps after ``--warmup`` untimed ones; CPU uses
  ``time.perf_counter``, CUDA uses CUDA events around each step and synchronizes on the end event.
  img/s = batch / median latency.
* Peak memory: one more step after the timed ones. CUDA: ``torch.cuda.max_memory_allocated`` after
  resetting the peak (weights, input, activations, gradients, workspaces). CPU: PyTorch keeps no
  CPU allocator statistics and RSS hides reuse of freed pages, so the step runs under
  ``torch.profiler`` with ``profile_memory=True``; the highest point of the running sum of its
  allocation/free events is added to the bytes of weights, buffers and input already alive.
* FLOPs: fvcore's ``FlopCountAnalysis`` (mmengine's ``FlopAnalyzer`` when fvcore is missing) on
  one batch-1 forward per model and size, with a handle for ``scaled_dot_product_attention``
  that neither ships. Both count one per multiply-add; the table doubles that so it is on the
  matmul's scale (2 N^3 for N x N times N x N). Elementwise ops are not counted. train rows use
  3 x the forward count (backward ~ 2 x forward), an estimate.
* Matmul peak: the median rate of an N x N @ N x N matmul in ``--dtype`` (N = ``--matmul-size``),
  measured in the same run; "% of matmul peak" is a row's GFLOP/s over it.
* "ratio to timm ViT-B": the row's img/s over timm ``vit_base_patch16_224``'s at the same input
  and mode (> 1 is faster).

* Targets (``--targets SIZES``): the issue's ratios, timed so that machine noise cancels. The
  models of a ratio are built side by side, stepped once untimed, then timed one step each per
  round for ``--target-rounds`` rounds, the order reversed every other round; each round gives
  one ratio of two latencies measured seconds apart, and the table reports the median and the
  range of those. Memory and matmul-share targets are read from the main rows.

Modules: :mod:`.core` (run and row records, inputs, steps), :mod:`.peers`, :mod:`.timing`,
:mod:`.memory`, :mod:`.flops`, :mod:`.rows` (backbone rows and variants), :mod:`.full_model`,
:mod:`.targets`, :mod:`.report`, :mod:`.breakdown`, :mod:`.components`, :mod:`.train_loop`,
:mod:`.dry_run`.
"""
