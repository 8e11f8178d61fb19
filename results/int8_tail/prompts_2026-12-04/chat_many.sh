cd /work/main
./target/release/examples/int8_tail --prompt $'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the boiling point of water?<|im_end|>\n<|im_start|>assistant\n' -n 24 --no-gpu --no-points --jitter-seeds 10 --jitter-first $1 --errors-dir /tmp/i22/many_chat > /tmp/i22/chat_many_$1.txt 2>&1
