"""Format maths, with no slot in it: what each format is (:mod:`.elements`: bit layouts, encode/decode;
:mod:`.formats`: the named formats and their scale rules), how block scales are computed (:mod:`.scales`) and
how a tensor is rounded to a format (:mod:`.quantize`). Any tensor, any device: the CPU's numbers are the
reference the tests hold these to (torch's casts, torchao's MX reference)."""
