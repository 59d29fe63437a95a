"""Tests for keras_tpu.data.sources.tfds_download: tfds gets to the download, and its failures are named.

No test touches the network: tfds's one URL fetch (`downloader._open_url`) is
replaced by a stand-in that records the URL and raises.
"""

import configparser
import os
import urllib.error

import pytest
import requests
import tensorflow_datasets as tfds
from tensorflow_datasets.core.download import downloader

from keras_tpu.data.sources import file_sources
from keras_tpu.data.sources import sources
from keras_tpu.data.sources import tfds_download
from tests.conftest import REPO

FASHION_MNIST_FILES = {
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
}


class _NoNetwork(requests.exceptions.ConnectionError):
    """What requests raises offline; here raised instead of opening the URL."""


@pytest.fixture
def fetched(monkeypatch):
    """Replace tfds's URL fetch: record each URL, then fail as an offline machine does."""
    urls = []

    def open_url(url, **kwargs):
        del kwargs
        urls.append(url)
        raise _NoNetwork(f"Failed to resolve host for {url}")

    monkeypatch.setattr(downloader, "_open_url", open_url)
    # Get past the up-front name lookup (which fails fast here) to tfds's own download.
    monkeypatch.setattr(tfds_download, "unresolved_host", lambda urls: None)
    return urls


def test_fashion_mnist_gets_past_its_imports_and_checksums_to_the_download(fetched, tmp_path):
    with pytest.raises(sources.DatasetUnavailableError) as e:
        file_sources.tfds_source("fashion_mnist", "train", data_dir=str(tmp_path))
    # The builder imported what it needs, found its registered checksums (its four files)
    # and started downloading them: with internet, these downloads are all that is left.
    # tfds fetches them in parallel and the first failure cancels the others, so under
    # load fewer than four may have started (a CI run saw three).
    registered = tfds.builder("fashion_mnist", data_dir=str(tmp_path)).url_infos
    assert {url.rsplit("/", 1)[1] for url in registered} == FASHION_MNIST_FILES
    assert own_urls(fetched, registered)
    assert any(isinstance(c, _NoNetwork) for c in tfds_download._chain(e.value))
    message = str(e.value)
    assert message.startswith(f"tfds dataset 'fashion_mnist' is not in data_dir {tmp_path} ")
    assert ": no network (_NoNetwork: Failed to resolve host" in message
    assert "Fix: run where there is internet" in message and "\n" not in message


def test_cifar10_gets_to_the_download(fetched, tmp_path):
    with pytest.raises(sources.DatasetUnavailableError, match="no network"):
        file_sources.tfds_source("cifar10", "train", data_dir=str(tmp_path))
    registered = tfds.builder("cifar10", data_dir=str(tmp_path)).url_infos
    assert own_urls(fetched, registered) == ["https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"]


def own_urls(fetched, registered):
    """Return the URLs in `fetched` that the builder under test registered.

    tfds downloads on a thread pool of its own that outlives a test: a fetch an earlier
    test queued (fashion_mnist's fourth file, once in CI) can start during the next test
    and reach its stand-in, which looks `_open_url` up at each call.
    """
    return [url for url in fetched if url in registered]


def test_a_missing_package_is_named_not_the_network(monkeypatch, tmp_path):
    # What fashion_mnist raised before importlib_resources was declared (tfds 4.9.10).
    def missing(self, *args, **kwargs):
        raise ModuleNotFoundError("No module named 'importlib_resources'", name="importlib_resources")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", missing)
    monkeypatch.setattr(tfds_download, "unresolved_host", lambda urls: None)  # As with internet.
    with pytest.raises(sources.DatasetUnavailableError) as e:
        file_sources.tfds_source("fashion_mnist", "train", data_dir=str(tmp_path))
    message = str(e.value)
    assert "needs the Python package 'importlib_resources'" in message
    assert "Fix: pip install importlib_resources" in message and "internet" not in message


@pytest.mark.parametrize(
    "error, reason",
    [
        (urllib.error.URLError("[Errno -2] Name or service not known"), "no network (URLError"),
        (TimeoutError("timed out"), "no network (TimeoutError"),
        (OSError(28, "No space left on device"), "(OSError: [Errno 28] No space left"),
        (RuntimeError("outer"), "(RuntimeError: outer)"),
    ],
)
def test_failure_message_names_the_cause(error, reason):
    message = tfds_download.failure_message("mnist", "/data", error)
    assert message.startswith("tfds dataset 'mnist' is not in data_dir /data and could not ")
    assert reason in message and " Fix: " in message


def test_a_network_error_under_another_error_is_found():
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except OSError as inner:
            raise RuntimeError("download failed") from inner
    except RuntimeError as outer:
        message = tfds_download.failure_message("mnist", "/data", outer)
    assert "no network (ConnectionRefusedError" in message


def test_setup_declares_what_tfds_imports_to_download():
    config = configparser.ConfigParser()
    config.read(os.path.join(REPO, "setup.cfg"))
    required = config["options"]["install_requires"]
    assert "importlib_resources" in required
    import importlib_resources  # noqa: F401  (installed, as the declaration promises)


def test_an_unresolvable_download_host_fails_fast_naming_the_network(monkeypatch, tmp_path):
    """Offline, tfds would retry for minutes; the name lookup fails first, in one line."""
    def lookup(host, port):
        raise tfds_download.socket.gaierror(-2, f"Name or service not known: {host}")

    monkeypatch.setattr(tfds_download.socket, "getaddrinfo", lookup)
    monkeypatch.setattr(downloader, "_open_url", lambda url, **kw: pytest.fail(f"fetched {url}"))
    with pytest.raises(sources.DatasetUnavailableError) as e:
        file_sources.tfds_source("fashion_mnist", "train", data_dir=str(tmp_path))
    message = str(e.value)
    assert ": no network (" in message and "fashion-mnist" in message and "\n" not in message
