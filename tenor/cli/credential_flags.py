"""The cell-credential flags every cell command shares: the token and TLS files.

--token-file PATH   the cell token (one per line; the first is sent); default $TENOR_TOKEN,
                    else the token in the cell root
--tls-cert/--tls-key/--tls-ca   TLS on gRPC (a server with --tls-ca requires client certificates)
"""

from __future__ import annotations

import argparse
import os

from tenor.auth.channels import CellCredentials
from tenor.auth.tls import TlsFiles
from tenor.auth.tokens import TOKEN_ENV


def add_credential_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help=f"the cell token file (default: ${TOKEN_ENV}, else the token in the cell root)",
    )
    parser.add_argument("--tls-cert", metavar="PEM", help="certificate to present (servers; clients for mTLS)")
    parser.add_argument("--tls-key", metavar="PEM", help="its private key")
    parser.add_argument(
        "--tls-ca",
        metavar="PEM",
        help="CA that signs the other side's certificate (on a server: requires client certs)",
    )


def credentials_from(args: argparse.Namespace) -> CellCredentials:
    token = os.environ.get(TOKEN_ENV) or None
    if args.token_file is not None:
        token = None  # the flag wins over the environment
    return CellCredentials(
        token=token, token_file=args.token_file, tls=TlsFiles(args.tls_cert, args.tls_key, args.tls_ca)
    )
