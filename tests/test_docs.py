"""Documentation that is generated from code stays current; the README's set-up commands are real."""
from helpers import ROOT

from traceview import schema


def test_tables_doc_is_current():
    assert (ROOT / "docs" / "TABLES.md").read_text() == schema.markdown_doc() + "\n", \
        "regenerate: python -c \"from traceview import schema; " \
        "open('docs/TABLES.md','w').write(schema.markdown_doc()+'\\n')\""


def test_readme_starts_with_the_two_setup_commands():
    text = (ROOT / "README.md").read_text()
    block = text.split("```sh", 1)[1].split("```", 1)[0].strip().splitlines()
    assert block[0].startswith("pip install . && traceview analyze fixtures/")
    trace = block[0].split("traceview analyze ", 1)[1].split()[0]
    assert (ROOT / trace).exists()
    assert block[1] == "pip install -e '.[test]' && python -m pytest -q"
    ci = (ROOT / ".ci" / "run").read_text()
    # CI installs the optional Dask extra too (the Dask tests skip without it)
    assert "python3 -m pip install -q -e '.[test,dask]' && python3 -m pytest -q" in ci


def test_conventions_doc_names_every_framework_fixture():
    from fixtures import frameworks
    text = (ROOT / "docs" / "CONVENTIONS.md").read_text()
    for name in frameworks.NAMES:
        assert f"`{name}`" in text, name
    assert "fixtures/deepseek.py" in text
