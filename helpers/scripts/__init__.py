"""Scripts the notebooks launch with command-line tools (torchrun). They ship inside the package so that
every install has them; run them by path (`helpers.distributed.SCRIPT`)."""
