"""Report renderers: JSON is written by the stages; JUnit XML and Markdown for CI; HTML for people."""
