"""End-to-end tests of the editor clients (editor-client/)."""
