"""`loam serve`: compiled models served to many clients at once.

A package (`package`, what it holds: `spec`) is a folder whose `model.json` names the model's role, its
numerical stages (graphs Loam builds), its checkpoint sources, its tokenizer and its capacities.  The
roles are one table (`roles`): each says how its packages are read, which control frames their
requests, which worker runs them and which HTTP routes reach them.  The server (`server`) registers
packages and gives each model its role's worker (`scheduler`), which forms cohorts oldest-first and
runs them off the HTTP event loop.  Two roles: finite requests (`finite`: embeddings, with pooling
inside the stage, `pooling`; routes in `embedding_http`) and retained text (`text`: a decoder whose
conversations are rows of KV state in a block pool, `kv`; sampling per request, `sampling`; routes in
`text_http`).  The HTTP face (`app`, on `web`'s shared pieces) speaks OpenAI's API, with Prometheus
metrics (`metrics`); `cli` is `loam serve`, and `ray_deploy` runs the same app as a Ray Serve
deployment of several replicas (`loam serve --ray`).
"""
