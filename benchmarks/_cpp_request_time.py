"""The whole-request time of one ``llama-speculative-simple`` run, from what it reported: one
rule for the benchmark that runs the tool and for the tables made from runs kept before the
rule changed. Imports nothing, so the tables need neither the tools nor pyspec."""


def request_seconds(prompt_seconds: float, tokens: int, rate: float, n_predict: int) -> float:
    """The tool's whole-request time, to compare with a request that stops at n_predict.

    The tool stops only after the batch that passes n_predict (a long accepted draft has
    carried it to 161 tokens for 96), so its time is its prompt plus n_predict tokens at its decode
    rate; a request that ended before n_predict (the model's end of text) took its prompt and
    the tokens it decoded. (Until session 41 such a request was also charged the whole
    n_predict: a quarter of the chat requests, their sums up to 20% too long.)
    """
    return prompt_seconds + (min(tokens, n_predict) / rate if rate else 0.0)
