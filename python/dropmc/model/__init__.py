"""What a model is, read from one forward: the data-flow trace
(:mod:`.trace`, :mod:`.trace_masks`, :mod:`.paths`), the norms recognised by
what they compute (:mod:`.norms`), the sites (:mod:`.discovery`,
:mod:`.masks`, :mod:`.select`, :mod:`.mha`, :mod:`.linear_path`,
:mod:`.batchnorm_pairs`), the inputs' checks (:mod:`.inputs`) and the
network noise ledger (:mod:`.network_ledger`, :mod:`.network_rules`,
:mod:`.network_mha`). It imports neither :mod:`dropmc.correct` nor
:mod:`dropmc.audit` (``.ci/import_cycles.py`` checks the layer order)."""
