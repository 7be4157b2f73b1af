"""Karpenter's v1 APIs: documents, validation, typed models, CRDs and conversion from older versions."""

from controller.api.documents import Document, DocumentError, load_documents
from controller.api.models import (
    EC2NodeClass,
    NodeClaim,
    NodePool,
    parse_ec2nodeclass,
    parse_nodeclaim,
    parse_nodepool,
)
from controller.api.validation import DocumentIssue, InvalidDocument, validate_document

__all__ = [
    "Document",
    "DocumentError",
    "DocumentIssue",
    "EC2NodeClass",
    "InvalidDocument",
    "NodeClaim",
    "NodePool",
    "load_documents",
    "parse_ec2nodeclass",
    "parse_nodeclaim",
    "parse_nodepool",
    "validate_document",
]
