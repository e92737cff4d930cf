"""The public Python API says what it does: help() on each name a user meets answers."""
from __future__ import annotations

import inspect

import cuptiprof
from cuptiprof.analyse.profile import Profile


def test_every_public_profile_method_has_a_docstring():
    missing = [name for name, m in inspect.getmembers(Profile, inspect.isfunction)
               if not name.startswith("_") and not (m.__doc__ or "").strip()]
    assert not missing, f"Profile methods without a docstring: {missing}"


def test_report_docstring_names_every_report():
    from cuptiprof.analyse import catalog
    doc = Profile.report.__doc__
    names = catalog.report_names()
    assert len(names) >= 10
    assert all(f"'{n}'" in doc for n in names), doc


def test_profile_names_where_its_parameters_are_documented():
    """profile() points at a class a user can find, and that class documents every parameter."""
    import importlib
    doc = cuptiprof.profile.__doc__
    path = "cuptiprof.collect.session.Session"
    assert path in doc
    mod, cls = path.rsplit(".", 1)
    session_doc = getattr(importlib.import_module(mod), cls).__doc__
    for p in inspect.signature(cuptiprof.profile).parameters:
        if p != "options" and p != "path":
            assert f"{p}:" in session_doc, p
    assert "cuptiprof run --light" in session_doc   # the two meanings of light told apart
