"""The floor under every layer: stream ids, sequence tokens, batch containers and their codec,
errors, observers, the logging context, provider options, and the embedded store's connection
with the small stores built on it (pub-sub records, dead letters).

Nothing here imports from anywhere else in headrace; everything else may import from here.
"""
