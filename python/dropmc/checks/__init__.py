"""The layer checks: dropmc's claims on one layer a user hands over — a
dropout (:mod:`.dropout`), an attention dropout (:mod:`.attention`), a
BatchNorm (:mod:`.batchnorm`, with torch's runner in :mod:`.torch_batchnorm`)
— and what they share (:mod:`.core`: ``Result``, the suite's critical z,
the checks of a user's input and output; :mod:`.torch_common`: tensors to
and from numpy). The lowest layer of the package: it imports only the
compiled extension. The public names are re-exported by :mod:`dropmc` and
:mod:`dropmc.torch`."""
