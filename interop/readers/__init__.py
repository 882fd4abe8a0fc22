"""The real JS readers (openai-node, @anthropic-ai/sdk, @google/genai, the AI SDK) through
`lockgate proxy`, on mutated real recordings: an opt-in differential, outside the suite."""
