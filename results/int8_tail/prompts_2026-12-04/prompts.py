prompts = {
 "code_fib": "def fibonacci(n):\n    if n <= 1:\n        return n\n",
 "chat_water": "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the boiling point of water?<|im_end|>\n<|im_start|>assistant\n",
 "story": "Once upon a time, in a small village by the sea,",
 "primes": "The first ten prime numbers are 2, 3, 5,",
 "json": "{\"name\": \"Alice\", \"age\": 30, \"city\":",
 "softmax": "import numpy as np\n\ndef softmax(x):\n",
}
