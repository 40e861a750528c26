"""The floor under every layer: stream ids, sequence tokens, batch containers and their codec,
the formats of foreign records, errors, observers, the logging context, provider options,
the outage log and the one retry/back-off helper, and the embedded store's connection with
the small stores built on it (pub-sub records, dead letters).

Nothing here imports from anywhere else in headrace; everything else may import from here.
"""
