"""Say why a tfds dataset could not be downloaded: a missing package, no network, or else.

`tfds_source` downloads and prepares a dataset that is not in data_dir yet. That
fails for different reasons that need different fixes, so the message names the
one that happened instead of always asking for internet: tensorflow-datasets
4.9.x imports `importlib_resources` on the download path (dataset_builder.py)
but declares it only for Python < 3.9 (keras_tpu declares it in setup.cfg).
"""

import socket
import urllib.error
import urllib.parse

# Exceptions that mean the network (DNS, a connection, a proxy) failed. requests'
# errors are OSErrors too, but so is a full disk: these are the network's own.
_NETWORK_ERRORS = (urllib.error.URLError, socket.gaierror, ConnectionError, TimeoutError)


def urls_to_fetch(builder):
    """Return the URLs `builder.download_and_prepare()` would fetch (none under tfds's mock).

    `tfds.testing.mock_data` replaces the download with a no-op (tfds/testing/mocking.py),
    so a mocked builder fetches nothing and needs no network.
    """
    download = type(builder).download_and_prepare
    if getattr(download, "__module__", "").startswith("tensorflow_datasets.testing"):
        return ()
    return builder.url_infos or ()


def unresolved_host(urls):
    """Return the OSError of the first download host in `urls` that DNS cannot resolve, or None.

    Offline, tfds's HTTP client retries each file with back-off for minutes before
    it fails; a name lookup fails in under a second, so `tfds_source` asks first.
    """
    for host in sorted({urllib.parse.urlparse(url).hostname for url in urls or ()} - {None}):
        try:
            socket.getaddrinfo(host, 443)
        except OSError as e:
            return e
    return None


def _chain(error):
    """Yield `error` and the exceptions it was raised from or during, innermost last."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _is_network_error(error):
    try:
        import requests  # pylint: disable=g-import-not-at-top  (tfds's own HTTP client)

        network = _NETWORK_ERRORS + (requests.exceptions.ConnectionError,)
    except ImportError:
        network = _NETWORK_ERRORS
    return isinstance(error, network)


def failure_message(name, data_dir, error):
    """Return the one-line reason `name` could not be downloaded into `data_dir`, and the fix.

    Args:
      name: the tfds dataset name, e.g. "fashion_mnist".
      data_dir: where tfds looked for a prepared copy.
      error: what `builder.download_and_prepare()` raised.
    """
    elsewhere = (
        "or point data_dir at a prepared copy (or a gs:// bucket with try_gcs); offline, "
        "use the 'digits' dataset"
    )
    head = f"tfds dataset {name!r} is not in data_dir {data_dir} and could not be downloaded"
    for cause in _chain(error):
        if isinstance(cause, ImportError):
            module = (cause.name or str(cause)).split(".")[0]
            return (
                f"{head}: tensorflow-datasets needs the Python package {module!r} to download "
                f"and prepare it, and it is not installed ({type(cause).__name__}: {cause}). "
                f'Fix: pip install {module} (or reinstall keras_tpu: pip install -e ".", '
                f"which declares it), {elsewhere}."
            )
        if _is_network_error(cause):
            return (
                f"{head}: no network ({type(cause).__name__}: {str(cause)[:200]}). Fix: run "
                f"where there is internet (tfds downloads it once into data_dir), {elsewhere}."
            )
    return (
        f"{head} ({type(error).__name__}: {str(error)[:200]}). Fix: check data_dir and "
        f"the error above, {elsewhere}."
    )
