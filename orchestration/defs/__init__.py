"""The dg project's component folder: binlake/defs.yaml declares the BinlakeComponent."""
