"""The batched inference loop: order by cost, cut by a budget, collate, prefetch, run, un-permute; and the
device it runs on."""
