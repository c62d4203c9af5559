"""`loam serve`: compiled models served to many clients at once (the serving guide, for Loam modules).

A package (`package`) is a folder whose `model.json` names the model's role, its numerical stages
(graphs Loam builds), its checkpoint sources, its tokenizer and its capacities.  The server
(`server`) registers packages and gives each model a worker (`scheduler`) that forms cohorts
oldest-first and runs them off the HTTP event loop.  Two contracts: finite requests (`finite`:
embeddings, with pooling inside the stage, `pooling`) and retained text (`text`: a decoder whose
conversations are rows of KV state in a block pool, `kv`; sampling per request, `sampling`).  The
HTTP face (`app`) speaks OpenAI's API, with Prometheus metrics (`metrics`); `cli` is `loam serve`, and
`ray_deploy` runs the same app as a Ray Serve deployment of several replicas (`loam serve --ray`).
"""
