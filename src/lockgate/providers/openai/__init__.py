"""The official `openai` SDK as transport, and OpenAI error bodies (Responses and Chat)."""
