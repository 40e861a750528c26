"""The floor under every layer: stream ids, sequence tokens, batch containers and their codec,
the formats of foreign records, errors, observers, the clock, the logging context, provider
options, durable state declarations, the outage log and the one retry/back-off helper, and
what a pub-sub record and a dead letter are (each backend keeps its own stores of them).

Nothing here imports from anywhere else in headrace; everything else may import from here.
"""
