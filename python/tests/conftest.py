"""Shared fixtures of the kiln package's test suites."""

import os
import sys

import pytest
import torch

# `fx_harness` (the translator tests' shared harness) imports by name from this folder.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def fresh_dynamo():
    """Dynamo's caches empty and torch's seed fixed before and after each test that uses
    it (`pytestmark = pytest.mark.usefixtures("fresh_dynamo")`)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()
