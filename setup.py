from setuptools import find_packages, setup

setup(
    name="paddle_npu",
    version="0.1.0",
    description="PaddlePaddle model -> ONNX -> NPU primitive operators, without importing Paddle",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=find_packages(include=["paddle_npu", "paddle_npu.*"]),
    package_data={"paddle_npu": ["frontend/*.json"]},
    install_requires=[
        "numpy>=1.22",
        "protobuf>=4.21",
        "onnx>=1.14",
        "onnx-ir>=0.1.16",        # 1.x imports sympy: deferred in paddle_npu/_deferred_imports.py
        "ml_dtypes>=0.2",
        "onnxruntime>=1.17",      # verification (convert --reference, lower --verify)
    ],
    extras_require={
        "plot": ["matplotlib>=3.5"],     # quant-report --plot as PNG (an SVG is written without it)
        "images": ["pillow>=9"],          # calibrate --data FOLDER_OF_IMAGES
        "test": [
            "pytest>=7",
            "hypothesis>=6",
            "paddlepaddle==3.3.1",
            "grpcio-tools>=1.60",
            "scikit-learn>=1.3",
            "pillow>=9",
        ],
    },
    # paddle2onnx-npu: paddle2onnx's own command line (`--model_dir ... --save_file ...`); not
    # named plain `paddle2onnx`, which would silently replace paddle2onnx's script.
    entry_points={"console_scripts": ["paddle-npu=paddle_npu.cli:run",
                                      "paddle2onnx-npu=paddle_npu.cli:run_paddle2onnx"]},
)
