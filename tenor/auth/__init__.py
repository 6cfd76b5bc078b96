"""The cell credential: a shared token (bearer metadata on every admin and model-server RPC)
and optional TLS (mTLS when a CA is given) on every gRPC port.

    tokens.py        the token set (first one sent, all accepted), where it comes from, reloading
    tls.py           certificate files -> gRPC server and channel credentials
    interceptors.py  the server-side check and the client-side bearer metadata
    channels.py      CellAccess: one process's credentials -> channels, server ports, interceptors
"""
