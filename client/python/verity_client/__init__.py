"""verity_client: a Python client of the Verity label-aggregation service.

DataFrames in, DataFrames out:

    import pandas as pd
    import verity_client

    labels = pd.read_csv("labels.csv", dtype=str)   # columns item, annotator, label
    with verity_client.Client("localhost:50051", timeout=30) as client:
        client.create_project("birds", ["false", "true"])
        client.submit("birds", labels)
        posteriors = client.posteriors("birds")     # item, label, confidence, false, true

A server with authentication on needs an API key: Client(..., api_key=KEY), or the
VERITY_API_KEY environment variable; an admin key manages keys with create_key, list_keys and
revoke_key.

Failures reported by the server raise VerityError, whose `code` is the grpc.StatusCode.
The gRPC stubs (package verity.v1) are generated from proto/verity/v1 at build time.
"""

from verity_client.client import (ApiKey, Client, CreatedKey, ModelStatus, ModelVersion,
                                  Project, Rejection, SubmitResult, METHODS, ROLES)
from verity_client.errors import VerityError

__all__ = ["ApiKey", "Client", "CreatedKey", "METHODS", "ModelStatus", "ModelVersion",
           "Project", "ROLES", "Rejection", "SubmitResult", "VerityError"]
