"""Decode records and their summaries (torch-free): what a run writes and how it resumes."""
