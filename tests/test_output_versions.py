"""The manifest's package versions: read from the metadata's header lines, as
importlib.metadata's own parse of the whole file gives them."""

from importlib import metadata

from ftsim.experiments.output import DEPENDENCIES, _version, versions


def test_the_versions_are_those_importlib_metadata_gives():
    expected = {}
    for name in ("ftsim", *DEPENDENCIES):
        try:
            expected[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            expected[name] = None
    found = versions()
    assert {k: v for k, v in found.items() if k != "python"} == expected
    assert any(expected.values())


class _Distribution(metadata.Distribution):
    """A distribution whose metadata file is the given text."""

    def __init__(self, text: str):
        self.text = text

    def read_text(self, filename):
        return self.text if filename == "METADATA" else None

    def locate_file(self, path):
        raise NotImplementedError


def test_the_version_is_the_header_field_whatever_its_case_and_the_body_says():
    header = "Metadata-Version: 2.1\nName: demo\nversion:  1.2.3 \nSummary: x\n"
    body = "\nVersion: 9.9.9 (the body of a long description)\n"
    assert _version(_Distribution(header + body)) == "1.2.3 "  # as the e-mail parser keeps it
    assert _version(_Distribution(header + body)) == _Distribution(header + body).version


def test_a_header_without_the_field_falls_back_to_the_full_parse():
    text = "Metadata-Version: 2.1\nName: demo\n\nVersion: 9 (in the body)\n"
    assert _version(_Distribution(text)) is None == _Distribution(text).version


def test_a_header_the_email_parser_reads_otherwise_is_left_to_it():
    for text in [
        "Name: demo\nVersion: 1.2\n  .3\n",  # folded onto the next line
        "Name: demo\nnot a field\nVersion: 1.2.3\n",  # the header ends there for it
        "Name: demo\r\nVersion:\t1.2.3\r\n\r\nbody\n",
    ]:
        assert _version(_Distribution(text)) == _Distribution(text).version
