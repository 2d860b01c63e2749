"""Several runs measured one after another: the configs of a sweep."""
