"""A model named on the command line (`plan --model`, `profile new MODEL`): its own files,
read as the deploy reads them (pyinfra_sglang/model_shape/files.py)."""

from __future__ import annotations

import argparse
import os

from pyinfra_sglang.cli.inventory_input import Refused


def read_model_argument(
    args: argparse.Namespace, endpoint: str, token_file: str | None, said_as: str
):
    """``args.model``'s files and shape: a folder (an existing directory, or a path starting
    with ``/`` or ``.``), else a Hub id at ``args.revision`` through ``endpoint``; Refused (2)
    where they cannot be read, the message starting with ``said_as``."""
    from pyinfra.api.exceptions import PyinfraError

    from pyinfra_sglang.model_shape.files import ModelFilesError, model_files, read_folder
    from pyinfra_sglang.model_shape.shape import ModelShapeError, shape_of
    from pyinfra_sglang.serving.secret_files import read_secret

    model = args.model
    try:
        if os.path.isdir(model) or model.startswith(("/", ".")):
            files = read_folder(model)
        else:
            token = read_secret(token_file, "hf_token_file", "controller") if token_file else None
            files = model_files(model, args.revision, endpoint, token)
        return files, shape_of(files.config)
    except (ModelFilesError, ModelShapeError, PyinfraError) as error:
        raise Refused(f"{said_as} {model}: {error}", 2) from None
