"""What a person reads: `show`'s tables, the report document and its figures, compare, trend, the studies' analyses."""
